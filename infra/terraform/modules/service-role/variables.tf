variable "name" {
  description = "The role's name (one role per service: \"samsa-prod-dc-a-broker\")."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9+=,.@_-]{1,58}$", var.name))
    error_message = "name: 1-58 characters allowed in an IAM role name."
  }
}

variable "policies" {
  description = "IAM policy documents with what this service alone needs, by a name of each (e.g. {service = ...}); {} for none. The names must be known at plan (the documents may not be: a policy naming a resource made in the same apply)."
  type        = map(string)
  default     = {}
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}

variable "secret_arns" {
  description = "The Secrets Manager secrets this service reads at boot (module secrets' ARNs; a replica's region may be \"*\"): [] for none."
  type        = list(string)
  default     = []
}

variable "secrets_kms_key_arns" {
  description = "The KMS keys that encrypt those secrets where this service reads them (through Secrets Manager only)."
  type        = list(string)
  default     = []
}
