# Named as the local and production environments name them.

variable "datacenters" {
  description = "The producer datacenter and its AWS region."
  type        = map(string)
  default     = { "dc-staging" = "us-east-1" }
  validation {
    condition     = toset(keys(var.datacenters)) == toset(["dc-staging"]) && alltrue([for r in values(var.datacenters) : can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", r))])
    error_message = "datacenters: exactly dc-staging (the provider blocks in main.tf name them), each mapped to an AWS region such as us-east-1."
  }
}

variable "analysis_region" {
  description = "The analysis datacenter's AWS region (the same region in staging)."
  type        = string
  default     = "us-east-1"
  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.analysis_region))
    error_message = "analysis_region: an AWS region, such as us-east-2."
  }
}

variable "brokers_per_dc" {
  description = "Brokers in the producer datacenter's cluster (topology.toml says the same)."
  type        = number
  default     = 2
}

variable "analysis_brokers" {
  description = "Brokers in the analysis cluster."
  type        = number
  default     = 2
}

variable "replication_factor" {
  description = "Replicas of each partition in every cluster (topology.toml says the same; rendered into the brokers' settings), on brokers of different availability zones where the subnets allow."
  type        = number
  default     = 2
  validation {
    condition     = var.replication_factor >= 1 && floor(var.replication_factor) == var.replication_factor && var.replication_factor <= min(var.brokers_per_dc, var.analysis_brokers)
    error_message = "replication_factor: a whole number from 1 to the brokers of the smallest cluster (brokers_per_dc, analysis_brokers): each replica lives on another broker."
  }
}

variable "partitions" {
  description = "Partitions per broker of an automatically created topic (rendered from topology.toml)."
  type        = number
  default     = 4
  validation {
    condition     = var.partitions >= 1 && floor(var.partitions) == var.partitions
    error_message = "partitions: a whole number, at least 1."
  }
}

variable "retention_hours" {
  description = "How long brokers keep messages (rendered from topology.toml)."
  type        = number
  default     = 72
  validation {
    condition     = var.retention_hours > 0
    error_message = "retention_hours must be positive."
  }
}

variable "mirror_whitelist" {
  description = "Topics mirrored into the analysis cluster."
  type        = string
  default     = ".*"
}

variable "write_mb_per_s" {
  description = "Expected write rate into the producer datacenter (MB/s)."
  type        = number
  default     = 2
  validation {
    condition     = var.write_mb_per_s > 0
    error_message = "write_mb_per_s must be positive (it sizes the data volumes)."
  }
}

variable "ami_ids" {
  description = "A Debian 12 AMI per region."
  type        = map(string)
  validation {
    condition     = alltrue([for r in concat(values(var.datacenters), [var.analysis_region]) : can(regex("^ami-[0-9a-f]{8,17}$", lookup(var.ami_ids, r, "")))])
    error_message = "ami_ids: an AMI id (ami-...) for every region the environment uses: each datacenter's and analysis_region."
  }
}

variable "image_registry" {
  description = "Where the project's images are pushed (infra/terraform/README.md, \"Boot\"), e.g. 123456789012.dkr.ecr.us-east-2.amazonaws.com: the instances pull REGISTRY/samsa/<image>:<image_version>. \"\" (the default): the environment's own (module registry, its output registry)."
  type        = string
  default     = ""
  validation {
    condition     = var.image_registry == "" || can(regex("^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$", var.image_registry))
    error_message = "image_registry: a registry host (and path), no scheme; or \"\" for the environment's own."
  }
}

variable "image_version" {
  description = "The tag of the images the instances run: what make push-images printed (VERSION-REVISION, a tag per build; the registry's tags are immutable)."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9._-]{1,128}$", var.image_version))
    error_message = "image_version: a tag (letters, digits, '.', '_', '-')."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = { "samsa:environment" = "staging" }
}

variable "mirror_processes" {
  description = "Mirror processes (instances) in the analysis datacenter."
  type        = number
  default     = 1
  validation {
    condition     = var.mirror_processes >= 1 && var.mirror_processes <= 10 && floor(var.mirror_processes) == var.mirror_processes
    error_message = "mirror_processes: a whole number from 1 to 10."
  }
}

variable "operator_cidrs" {
  description = "The operators' networks: they may open the audit report and the Airflow UI (both stay inside the VPCs otherwise)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.operator_cidrs : try(can(regex("^[0-9.]+/[0-9]+$", c)) && cidrhost(c, 0) != "" && tonumber(split("/", c)[1]) >= 8, false)])
    error_message = "operator_cidrs: IPv4 ranges (a.b.c.d/n), each /8 or narrower: never the whole internet, in any spelling (0.0.0.0/0, 0.0.0.0/1, ...)."
  }
}

variable "warehouse_bucket" {
  description = "Name of the S3 bucket made for the warehouse (Parquet, offsets, audit reports)."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.warehouse_bucket)) && !can(regex("\\.\\.", var.warehouse_bucket))
    error_message = "warehouse_bucket: an S3 bucket name, 3-63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit."
  }
}

variable "password_generation" {
  description = "Bump to generate every password of the environment anew (module secrets; a rotation, docs/security.md \"In the cloud\")."
  type        = number
  default     = 1
  validation {
    condition     = var.password_generation >= 1 && floor(var.password_generation) == var.password_generation
    error_message = "password_generation: a whole number, 1 or more."
  }
}
