variable "images" {
  description = "The images the instances run: a repository samsa/<image> each (infra/docker/push.py's CLOUD_IMAGES)."
  type        = list(string)
  default     = ["zookeeper", "samsa", "analysis"]
  validation {
    condition     = length(var.images) > 0 && alltrue([for i in var.images : can(regex("^[a-z0-9][a-z0-9._-]*$", i))])
    error_message = "images: one or more image names (lower case letters, digits and ._-)."
  }
}

variable "kms_key_arn" {
  description = "The KMS key that encrypts the images."
  type        = string
}

variable "keep_images" {
  description = "The newest images kept per repository (older ones expire): at least as many as the builds a rollback may go back to."
  type        = number
  default     = 30
  validation {
    condition     = var.keep_images >= 2 && var.keep_images <= 1000 && floor(var.keep_images) == var.keep_images
    error_message = "keep_images: a whole number from 2 to 1000."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
