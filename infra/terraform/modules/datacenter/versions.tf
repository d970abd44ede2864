terraform {
  required_version = ">= 1.9.0" # module broker-cluster's validations refer to another variable
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.80"
    }
  }
}
