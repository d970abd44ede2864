terraform {
  # terraform_data is built into Terraform (1.4+): no provider to download
  required_version = ">= 1.5.0"
}
