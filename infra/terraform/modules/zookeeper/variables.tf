variable "name" {
  description = "Name prefix of every resource (e.g. \"samsa-prod-dc-a\")."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,40}$", var.name))
    error_message = "name: 2-41 lower-case letters, digits and '-', starting with a letter."
  }
}

variable "size" {
  description = "Ensemble members: an odd number (3 tolerates one failure, 5 two)."
  type        = number
  default     = 3
  validation {
    condition     = contains([1, 3, 5, 7], var.size)
    error_message = "size must be 1, 3, 5 or 7 (an even quorum tolerates no more failures than the odd one below it)."
  }
}

variable "vpc_id" {
  description = "The datacenter's VPC (module network)."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets; member i goes to subnet i modulo their number (spread over availability zones)."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "Give at least one private subnet."
  }
}

variable "client_cidrs" {
  description = "Who may connect to the client port (2181): the VPC's range (brokers, loader, audit run there) and, in a producer datacenter, the analysis VPC's (the mirror). Never 0.0.0.0/0."
  type        = list(string)
  validation {
    condition     = length(var.client_cidrs) > 0 && alltrue([for c in var.client_cidrs : try(can(regex("^[0-9.]+/[0-9]+$", c)) && cidrhost(c, 0) != "" && tonumber(split("/", c)[1]) >= 8, false)])
    error_message = "client_cidrs: one or more IPv4 ranges (a.b.c.d/n), each /8 or narrower: never the whole internet, in any spelling (0.0.0.0/0, 0.0.0.0/1, ...)."
  }
}

variable "instance_type" {
  description = "EC2 instance type of a member."
  type        = string
  default     = "m6i.large"
}

variable "data_volume_gb" {
  description = "Encrypted gp3 volume for ZooKeeper's snapshots and transaction log."
  type        = number
  default     = 50
  validation {
    condition     = var.data_volume_gb >= 10 && var.data_volume_gb <= 16384 && floor(var.data_volume_gb) == var.data_volume_gb
    error_message = "data_volume_gb: a whole number of GB from 10 to 16384 (gp3)."
  }
}

variable "ami_id" {
  description = "A Debian 12 (bookworm) AMI; the boot script installs the container engine and runs the image."
  type        = string
}

variable "image" {
  description = "The samsa/zookeeper image the members run (the one make test runs, pushed to the environment's registry): REGISTRY/samsa/zookeeper:VERSION."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9.:-]+(/[a-z0-9._-]+)+:[A-Za-z0-9._-]+$", var.image))
    error_message = "image: a reference with its registry, repository and tag (REGISTRY/samsa/zookeeper:VERSION)."
  }
}

variable "kms_key_arn" {
  description = "KMS key encrypting the volumes (null: the account's default EBS key)."
  type        = string
  default     = null
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

variable "secrets_name" {
  description = "The environment's secrets (module secrets' name, e.g. samsa-prod), read at boot by python -m infra.host_secrets: the ensemble runs secured (docs/security.md, \"In the cloud\"). \"\": it runs open (no TLS, no authentication)."
  type        = string
  validation {
    condition     = can(regex("^([A-Za-z0-9_+=.@-]+)?$", var.secrets_name))
    error_message = "secrets_name: the secrets' prefix (letters, digits and _+=.@-), or \"\" to run open."
  }
}

variable "tools_image" {
  description = "The samsa/samsa image whose python -m infra.host_secrets reads a member's secrets at boot when secured (REGISTRY/samsa/samsa:VERSION)."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9.:-]+(/[a-z0-9._-]+)+:[A-Za-z0-9._-]+$", var.tools_image))
    error_message = "tools_image: a reference with its registry, repository and tag (REGISTRY/samsa/samsa:VERSION)."
  }
}
