variable "name" {
  description = "Name prefix of every resource (e.g. \"samsa-prod-dc-a\")."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,40}$", var.name))
    error_message = "name: 2-41 lower-case letters, digits and '-', starting with a letter."
  }
}

variable "cluster" {
  description = "The cluster's name in the topology (its ZooKeeper chroot is /<cluster>)."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9_.-]+$", var.cluster))
    error_message = "cluster: letters, digits, '_', '.', '-'."
  }
}

variable "brokers" {
  description = "Brokers in the cluster; broker i has id i (kept across replacements: its data volume is its own)."
  type        = number
  default     = 3
  validation {
    condition     = var.brokers >= 1 && var.brokers <= 100
    error_message = "brokers must be between 1 and 100."
  }
}

variable "vpc_id" {
  description = "The datacenter's VPC."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets; broker i goes to subnet i modulo their number."
  type        = list(string)
  validation {
    condition     = length(var.subnet_ids) >= 1
    error_message = "Give at least one private subnet."
  }
}

variable "zookeeper_connect" {
  description = "The ensemble's connect string without chroot (module zookeeper's connect_string)."
  type        = string
}

variable "client_security_group_ids" {
  description = "Who may connect to the brokers' port, by name: the load balancer, the mirror, the loader (security group ids). Nothing else is admitted."
  type        = map(string)
}

variable "client_cidrs" {
  description = "Clients in other regions, by name (e.g. the analysis region's mirror subnets): security groups cannot be referenced across regions, so these admit address ranges. Never 0.0.0.0/0."
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for c in values(var.client_cidrs) : try(can(regex("^[0-9.]+/[0-9]+$", c)) && cidrhost(c, 0) != "" && tonumber(split("/", c)[1]) >= 8, false)])
    error_message = "client_cidrs: IPv4 ranges (a.b.c.d/n), each /8 or narrower: never the whole internet, in any spelling (0.0.0.0/0, 0.0.0.0/1, ...)."
  }
}

variable "metrics_cidrs" {
  description = "Who may scrape the brokers' /metrics (port 9093), e.g. the Prometheus subnet."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.metrics_cidrs : try(can(regex("^[0-9.]+/[0-9]+$", c)) && cidrhost(c, 0) != "" && tonumber(split("/", c)[1]) >= 8, false)])
    error_message = "metrics_cidrs: IPv4 ranges (a.b.c.d/n), each /8 or narrower: never the whole internet, in any spelling (0.0.0.0/0, 0.0.0.0/1, ...)."
  }
}

variable "broker_config_toml" {
  description = "The brokers' settings file, rendered from the topology model (python -m infra.render): every setting but the id, host and ZooKeeper, which start-up adds."
  type        = string
}

variable "acls_toml" {
  description = "The cluster's ACLs, rendered from the topology model (rendered/acls-<cluster>.toml, python -m infra.render), written to /etc/samsa/acls.toml for python -m infra.host_secrets provision; \"\" for none."
  type        = string
  default     = ""
}

variable "image" {
  description = "The samsa/samsa image the brokers run (the one make test runs, pushed to the environment's registry): REGISTRY/samsa/samsa:VERSION."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9.:-]+(/[a-z0-9._-]+)+:[A-Za-z0-9._-]+$", var.image))
    error_message = "image: a reference with its registry, repository and tag (REGISTRY/samsa/samsa:VERSION)."
  }
}

variable "replication_factor" {
  description = "Replicas of each partition (the replication_factor of the rendered settings; 0: unreplicated). Each replica is a full copy: the data volumes are sized for it."
  type        = number
  default     = 0
  validation {
    condition     = var.replication_factor >= 0 && var.replication_factor <= var.brokers
    error_message = "replication_factor must be between 0 and brokers: each replica lives on another broker."
  }
}

variable "write_mb_per_s" {
  description = "Expected write rate into this cluster, all producers together, in MB/s (sizes the data volumes)."
  type        = number
  validation {
    condition     = var.write_mb_per_s > 0
    error_message = "write_mb_per_s must be positive."
  }
}

variable "retention_hours" {
  description = "How long messages are kept (log.retention_ms of the rendered config; sizes the data volumes)."
  type        = number
  default     = 168
  validation {
    condition     = var.retention_hours > 0
    error_message = "retention_hours must be positive."
  }
}

variable "partitions_per_broker" {
  description = "Partitions a broker holds (each keeps up to one open segment past retention)."
  type        = number
  default     = 8
  validation {
    condition     = var.partitions_per_broker >= 1 && floor(var.partitions_per_broker) == var.partitions_per_broker
    error_message = "partitions_per_broker: a whole number, at least 1."
  }
}

variable "segment_gb" {
  description = "Segment size in GB (segment.bytes of the rendered config)."
  type        = number
  default     = 1
  validation {
    condition     = var.segment_gb > 0 && var.segment_gb <= 64
    error_message = "segment_gb: more than 0, at most 64."
  }
}

variable "headroom" {
  description = "Spare fraction of the data volume over the retained data (0.3 = 30 %)."
  type        = number
  default     = 0.3
  validation {
    condition     = var.headroom >= 0.1 && var.headroom <= 3
    error_message = "headroom must be between 0.1 and 3."
  }
}

variable "data_volume_gb" {
  description = "Override of the computed data volume size (null: computed, see README); at most gp3's 16,384 GiB."
  type        = number
  default     = null
  validation {
    condition     = var.data_volume_gb == null || try(var.data_volume_gb >= 20 && var.data_volume_gb <= 16384 && floor(var.data_volume_gb) == var.data_volume_gb, false)
    error_message = "data_volume_gb: a whole number of GB from 20 to 16384 (gp3's largest volume), or null."
  }
}

variable "instance_type" {
  description = "EC2 instance type of a broker."
  type        = string
  default     = "m6i.xlarge"
}

variable "ami_id" {
  description = "A Debian 12 (bookworm) AMI."
  type        = string
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
  description = "The environment's secrets (module secrets' name, e.g. samsa-prod), read at boot by python -m infra.host_secrets: the cluster runs secured (docs/security.md, \"In the cloud\"). \"\": it runs open (no TLS, no authentication)."
  type        = string
  validation {
    condition     = can(regex("^([A-Za-z0-9_+=.@-]+)?$", var.secrets_name))
    error_message = "secrets_name: the secrets' prefix (letters, digits and _+=.@-), or \"\" to run open."
  }
}

variable "certificate_names" {
  description = "More names the brokers' certificates are valid for, beside each broker's private address and DNS name: the load balancer's DNS name, which producers dial over TLS."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for n in var.certificate_names : can(regex("^[A-Za-z0-9.-]+$", n))])
    error_message = "certificate_names: DNS names (letters, digits, '.' and '-')."
  }
}
