variable "name" {
  description = "The database instance's identifier (e.g. \"samsa-prod-analysis-audit\")."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9]*(-[a-z0-9]+)*$", var.name)) && length(var.name) >= 2 && length(var.name) <= 49
    error_message = "name: 2-49 lower-case letters, digits and single '-' between them, starting with a letter (RDS refuses '--' and a trailing '-'; its monitoring role, NAME-rds-monitoring, must fit IAM's 64)."
  }
}

variable "database" {
  description = "The database (and its master user) to create."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9_]{0,62}$", var.database))
    error_message = "database: lower-case letters, digits and '_', starting with a letter."
  }
}

variable "vpc_id" {
  description = "The VPC the database lives in."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets (≥ 2, in different availability zones)."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 2
    error_message = "A database subnet group needs at least two subnets."
  }
}

variable "client_security_group_id" {
  description = "The one security group admitted to PostgreSQL (the service that owns the database)."
  type        = string
}

variable "instance_class" {
  description = "The RDS instance class."
  type        = string
  default     = "db.t4g.medium"
}

variable "allocated_gb" {
  description = "Storage, GB."
  type        = number
  default     = 50
  validation {
    condition     = var.allocated_gb >= 20 && var.allocated_gb <= 65536 && floor(var.allocated_gb) == var.allocated_gb
    error_message = "allocated_gb: a whole number of GB from 20 to 65536 (RDS for PostgreSQL)."
  }
}

variable "multi_az" {
  description = "A standby in another availability zone."
  type        = bool
  default     = true
}

variable "backup_days" {
  description = "Days of automated backups."
  type        = number
  default     = 14
  validation {
    condition     = var.backup_days >= 1 && var.backup_days <= 35
    error_message = "backup_days must be 1-35."
  }
}

variable "kms_key_arn" {
  description = "KMS key encrypting the storage, Performance Insights and the password's secret."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
