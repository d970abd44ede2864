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
  description = "Private subnets of the analysis VPC (≥ 2: the metadata database spans them)."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 2
    error_message = "Give at least two private subnets."
  }
}

variable "zookeeper_connect" {
  description = "The analysis cluster's ZooKeeper connect string with chroot (what the loader loads)."
  type        = string
}

variable "audit_url" {
  description = "The audit service's URL (module audit's url): the DAGs' gate."
  type        = string
}

variable "ui_cidrs" {
  description = "Who may open the Airflow UI (port 8080): the operators' network. Never 0.0.0.0/0."
  type        = list(string)
  validation {
    condition     = length(var.ui_cidrs) > 0 && alltrue([for c in var.ui_cidrs : try(can(regex("^[0-9.]+/[0-9]+$", c)) && cidrhost(c, 0) != "" && tonumber(split("/", c)[1]) >= 8, false)])
    error_message = "ui_cidrs: one or more IPv4 ranges (a.b.c.d/n), each /8 or narrower: never the whole internet, in any spelling (0.0.0.0/0, 0.0.0.0/1, ...)."
  }
}

variable "warehouse_bucket" {
  description = "Name of the S3 bucket made for the warehouse (Parquet, the loader's offsets, the audit reports)."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{2,62}$", var.warehouse_bucket))
    error_message = "warehouse_bucket must be a valid S3 bucket name."
  }
}

variable "instance_type" {
  description = "EC2 instance type running Airflow and the loader's Spark (local[*]: size it to the hourly volume)."
  type        = string
  default     = "r6i.2xlarge"
}

variable "db_instance_class" {
  description = "Airflow's metadata database (PostgreSQL) instance class."
  type        = string
  default     = "db.t4g.small"
}

variable "image" {
  description = "The samsa/analysis image the stack runs (the one make test runs: Airflow, the DAGs, the loader's Spark; pushed to the environment's registry): REGISTRY/samsa/analysis:VERSION."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9.:-]+(/[a-z0-9._-]+)+:[A-Za-z0-9._-]+$", var.image))
    error_message = "image: a reference with its registry, repository and tag (REGISTRY/samsa/analysis:VERSION)."
  }
}

variable "secrets_name" {
  description = "The environment's secrets (module secrets' name, e.g. samsa-prod), read at boot by python -m infra.host_secrets: the loader reads the analysis cluster as its user, the DAGs ask the audit over HTTPS (docs/security.md, \"In the cloud\"). \"\": open."
  type        = string
  validation {
    condition     = can(regex("^([A-Za-z0-9_+=.@-]+)?$", var.secrets_name))
    error_message = "secrets_name: the secrets' prefix (letters, digits and _+=.@-), or \"\" to run open."
  }
}

variable "ami_id" {
  description = "A Debian 12 AMI of the analysis region."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key encrypting the volume, the database, its secret and the bucket."
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
