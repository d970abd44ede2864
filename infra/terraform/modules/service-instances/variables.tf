variable "name" {
  description = "The service's name prefix: instances are \"<name>-<i>\", the security group and role \"<name>\"."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,50}$", var.name))
    error_message = "name: lower-case letters, digits and '-', starting with a letter."
  }
}

variable "description" {
  description = "What the service is (the security group's description)."
  type        = string
}

variable "instances" {
  description = "How many instances (instance i in subnet i modulo their number)."
  type        = number
  default     = 1
  validation {
    condition     = var.instances >= 1
    error_message = "instances must be at least 1."
  }
}

variable "vpc_id" {
  description = "The VPC."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets to spread the instances over."
  type        = list(string)
}

variable "private_ips" {
  description = "Fixed private addresses, instance i at index i (empty: assigned by AWS)."
  type        = list(string)
  default     = []
}

variable "user_data" {
  description = "Each instance's start-up script, instance i at index i (one entry: the same for all); passed gzip-compressed, which must fit EC2's 16 KB."
  type        = list(string)
  validation {
    condition     = length(var.user_data) > 0 && alltrue([for u in var.user_data : length(base64gzip(u)) * 3 / 4 <= 16384])
    error_message = "user_data: at least one script, each at most 16 KB once gzip-compressed (EC2's limit)."
  }
}

variable "root_volume_gb" {
  description = "The encrypted root volume's size."
  type        = number
  default     = 20
  validation {
    condition     = var.root_volume_gb >= 8 && var.root_volume_gb <= 16384 && floor(var.root_volume_gb) == var.root_volume_gb
    error_message = "root_volume_gb: a whole number of GB from 8 to 16384."
  }
}

variable "data_volume_gb" {
  description = "Each instance's encrypted data volume (GB), attached as /dev/xvdb: a volume of its own in its subnet's zone, which outlives the instance and which no plan may destroy (null: none); at most gp3's 16,384 GiB."
  type        = number
  default     = null
  validation {
    condition     = var.data_volume_gb == null || try(var.data_volume_gb >= 1 && var.data_volume_gb <= 16384 && floor(var.data_volume_gb) == var.data_volume_gb, false)
    error_message = "data_volume_gb (given, or computed by module broker-cluster from the write rate, retention, copies and brokers): a whole number of GB from 1 to 16384, gp3's largest volume; more brokers make each smaller."
  }
}

variable "instance_type" {
  description = "EC2 instance type."
  type        = string
}

variable "ami_id" {
  description = "A Debian 12 AMI."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key encrypting the volumes (null: the account's default EBS key)."
  type        = string
  default     = null
}

variable "policies" {
  description = "What this service alone may do: IAM policy documents by name (module service-role's policies; {}: nothing more)."
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
