variable "name" {
  description = "Name prefix (e.g. \"samsa-prod-analysis\")."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,40}$", var.name))
    error_message = "name: 2-41 lower-case letters, digits and '-', starting with a letter."
  }
}

variable "processes" {
  description = "Mirror processes (instances) sharing the copy as one consumer group."
  type        = number
  default     = 2
  validation {
    condition     = var.processes >= 1 && var.processes <= 20
    error_message = "processes must be between 1 and 20."
  }
}

variable "vpc_id" {
  description = "The analysis datacenter's VPC (the mirror pulls from the producer datacenters over peering)."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the analysis VPC."
  type        = list(string)
}

variable "mirror_config_template" {
  description = "The mirror's rendered settings (rendered/mirror-<name>.toml, python -m infra.render), with each cluster's ZooKeeper as a template variable zookeeper.<cluster>."
  type        = string
}

variable "zookeeper_connect" {
  description = "Each cluster's ZooKeeper connect string with its chroot, keyed by cluster name with '-' as '_' (\"dc_us_east\", \"analysis\")."
  type        = map(string)
}

variable "metrics_cidrs" {
  description = "Who may scrape the mirror's /metrics (port 9095)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.metrics_cidrs : try(can(regex("^[0-9.]+/[0-9]+$", c)) && cidrhost(c, 0) != "" && tonumber(split("/", c)[1]) >= 8, false)])
    error_message = "metrics_cidrs: IPv4 ranges (a.b.c.d/n), each /8 or narrower: never the whole internet, in any spelling (0.0.0.0/0, 0.0.0.0/1, ...)."
  }
}

variable "image" {
  description = "The samsa/samsa image the mirror runs (the one make test runs, pushed to the environment's registry): REGISTRY/samsa/samsa:VERSION."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9.:-]+(/[a-z0-9._-]+)+:[A-Za-z0-9._-]+$", var.image))
    error_message = "image: a reference with its registry, repository and tag (REGISTRY/samsa/samsa:VERSION)."
  }
}

variable "instance_type" {
  description = "EC2 instance type of a mirror process."
  type        = string
  default     = "c6i.large"
}

variable "ami_id" {
  description = "A Debian 12 AMI of the analysis region."
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key encrypting the root volumes (null: the account's default EBS key)."
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
  description = "The environment's secrets (module secrets' name, e.g. samsa-prod), read at boot by python -m infra.host_secrets: the mirror runs secured (docs/security.md, \"In the cloud\"). \"\": it runs open (no TLS, no authentication)."
  type        = string
  validation {
    condition     = can(regex("^([A-Za-z0-9_+=.@-]+)?$", var.secrets_name))
    error_message = "secrets_name: the secrets' prefix (letters, digits and _+=.@-), or \"\" to run open."
  }
}
