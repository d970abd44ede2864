terraform {
  required_version = ">= 1.9.0" # templatestring
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.80"
    }
  }
}
