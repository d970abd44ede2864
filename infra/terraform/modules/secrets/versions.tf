terraform {
  # ephemeral resources and write-only arguments: the generated passwords are
  # never written to the plan or the state
  required_version = ">= 1.11.0"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.100"
    }
  }
}
