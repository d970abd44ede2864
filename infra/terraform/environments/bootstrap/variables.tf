variable "region" {
  description = "Region of the state bucket and lock table."
  type        = string
  default     = "us-east-1"
  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region: an AWS region, such as us-east-1."
  }
}

variable "bucket" {
  description = "The state bucket's name (global in S3: e.g. samsa-terraform-state-<account id>)."
  type        = string
}

variable "lock_table" {
  description = "The DynamoDB lock table."
  type        = string
  default     = "samsa-terraform-locks"
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = { "samsa:environment" = "bootstrap" }
}
