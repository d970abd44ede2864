variable "name" {
  description = "Name prefix (e.g. \"samsa-prod-analysis\")."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,40}$", var.name))
    error_message = "name: 2-41 lower-case letters, digits and '-', starting with a letter."
  }
}

variable "vpc_id" {
  description = "The analysis datacenter's VPC."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the analysis VPC (the database spans them)."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 2
    error_message = "A database subnet group needs at least two subnets."
  }
}

variable "zookeeper_connect" {
  description = "The analysis cluster's ZooKeeper connect string with chroot (the audit topic arrives there)."
  type        = string
}

variable "reader_cidrs" {
  description = "Who may open the report pages and the API (port 8090): the analysis VPC (the DAGs) and the operators' network. Never 0.0.0.0/0."
  type        = list(string)
  validation {
    condition     = length(var.reader_cidrs) > 0 && alltrue([for c in var.reader_cidrs : try(can(regex("^[0-9.]+/[0-9]+$", c)) && cidrhost(c, 0) != "" && tonumber(split("/", c)[1]) >= 8, false)])
    error_message = "reader_cidrs: one or more IPv4 ranges (a.b.c.d/n), each /8 or narrower: never the whole internet, in any spelling (0.0.0.0/0, 0.0.0.0/1, ...)."
  }
}

variable "db_instance_class" {
  description = "The PostgreSQL instance class."
  type        = string
  default     = "db.t4g.medium"
}

variable "db_allocated_gb" {
  description = "Database storage (monitoring events: a few KB per topic, window and tier)."
  type        = number
  default     = 50
  validation {
    condition     = var.db_allocated_gb >= 20 && var.db_allocated_gb <= 65536 && floor(var.db_allocated_gb) == var.db_allocated_gb
    error_message = "db_allocated_gb: a whole number of GB from 20 to 65536 (RDS for PostgreSQL)."
  }
}

variable "db_multi_az" {
  description = "A standby in another availability zone."
  type        = bool
  default     = true
}

variable "db_backup_days" {
  description = "Days of automated backups."
  type        = number
  default     = 14
  validation {
    condition     = var.db_backup_days >= 1 && var.db_backup_days <= 35
    error_message = "db_backup_days must be 1-35."
  }
}

variable "image" {
  description = "The samsa/samsa image the audit service runs (the one make test runs, pushed to the environment's registry): REGISTRY/samsa/samsa:VERSION."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9.:-]+(/[a-z0-9._-]+)+:[A-Za-z0-9._-]+$", var.image))
    error_message = "image: a reference with its registry, repository and tag (REGISTRY/samsa/samsa:VERSION)."
  }
}

variable "secrets_name" {
  description = "The environment's secrets (module secrets' name, e.g. samsa-prod), read at boot by python -m infra.host_secrets: the audit service runs secured (docs/security.md, \"In the cloud\"). \"\": it runs open (no TLS, no authentication)."
  type        = string
  validation {
    condition     = can(regex("^([A-Za-z0-9_+=.@-]+)?$", var.secrets_name))
    error_message = "secrets_name: the secrets' prefix (letters, digits and _+=.@-), or \"\" to run open."
  }
}

variable "instance_type" {
  description = "EC2 instance type of the audit service."
  type        = string
  default     = "m6i.large"
}

variable "ami_id" {
  description = "A Debian 12 AMI of the analysis region."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key encrypting the volumes and the database."
  type        = string
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
