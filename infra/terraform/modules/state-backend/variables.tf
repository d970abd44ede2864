variable "bucket" {
  description = "The state bucket's name (S3 bucket names are global: add the account or a suffix of your own)."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket)) && !can(regex("\\.\\.", var.bucket))
    error_message = "bucket: 3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit."
  }
}

variable "lock_table" {
  description = "The DynamoDB table that holds the state locks."
  type        = string
  default     = "samsa-terraform-locks"
  validation {
    condition     = can(regex("^[A-Za-z0-9_.-]{3,255}$", var.lock_table))
    error_message = "lock_table: 3-255 letters, digits, '_', '.' and '-'."
  }
}

variable "noncurrent_version_days" {
  description = "How long an overwritten state stays recoverable (the bucket is versioned)."
  type        = number
  default     = 90
  validation {
    condition     = var.noncurrent_version_days >= 1 && floor(var.noncurrent_version_days) == var.noncurrent_version_days
    error_message = "noncurrent_version_days: a whole number of days, at least 1."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
