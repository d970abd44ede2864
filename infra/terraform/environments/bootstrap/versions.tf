terraform {
  required_version = ">= 1.11.0"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.100"
    }
  }
  # its own state stays local (terraform.tfstate here): it makes the backend
  # the other environments use, so it cannot keep its state in it
}
