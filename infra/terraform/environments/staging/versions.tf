terraform {
  required_version = ">= 1.11.0"
  # state in S3, locked in DynamoDB (environments/bootstrap makes both); the
  # bucket, lock table, KMS key and region come from backend.hcl at init, run
  # from this directory:
  #   terraform init -backend-config=../backend.hcl
  backend "s3" {
    key = "samsa/staging/terraform.tfstate"
  }
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.100"
    }
  }
}
