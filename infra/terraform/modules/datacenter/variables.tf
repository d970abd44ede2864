variable "name" {
  description = "Name prefix of the datacenter's resources (≤ 24 characters: its load balancer's target group is NAME-brokers, which AWS caps at 32; e.g. \"samsa-prod-use1\")."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,23}$", var.name))
    error_message = "name: 2-24 lower-case letters, digits and '-', starting with a letter (its load balancer's target group, NAME-brokers, must fit AWS's 32)."
  }
}

variable "cluster" {
  description = "The datacenter's cluster name in the topology (topology.toml), e.g. \"dc-us-east\"."
  type        = string
}

variable "cidr" {
  description = "The datacenter VPC's IPv4 range (distinct across datacenters: they are peered)."
  type        = string
}

variable "availability_zones" {
  description = "Availability zones of the region to spread the datacenter over."
  type        = list(string)
}

variable "zookeeper_image" {
  description = "The samsa/zookeeper image its ensemble runs (REGISTRY/samsa/zookeeper:VERSION)."
  type        = string
}

variable "zookeeper_size" {
  description = "ZooKeeper ensemble members."
  type        = number
  default     = 3
}

variable "brokers" {
  description = "Brokers in the datacenter's cluster (brokers_per_dc of the environment)."
  type        = number
  default     = 3
}

variable "load_balancer" {
  description = "Whether producers reach the cluster through a load balancer (every producer datacenter has one; the analysis cluster needs none)."
  type        = bool
  default     = true
}

variable "producer_cidrs" {
  description = "Where the datacenter's producers run (default: the VPC itself)."
  type        = list(string)
  default     = []
}

variable "remote_client_cidrs" {
  description = "Clients of the brokers and ZooKeeper in other regions, by name (the analysis VPC's range: the mirror)."
  type        = map(string)
  default     = {}
}

variable "local_client_security_group_ids" {
  description = "Clients of the brokers in this region, by name (the mirror, the loader: their security groups)."
  type        = map(string)
  default     = {}
}

variable "broker_config_toml" {
  description = "The brokers' rendered settings (rendered/broker-<cluster>.toml, python -m infra.render)."
  type        = string
}

variable "broker_acls_toml" {
  description = "The cluster's rendered ACLs (rendered/acls-<cluster>.toml, python -m infra.render); \"\" for none."
  type        = string
  default     = ""
}

variable "samsa_image" {
  description = "The samsa/samsa image its brokers run (REGISTRY/samsa/samsa:VERSION)."
  type        = string
}

variable "replication_factor" {
  description = "Replicas of each partition (must match replication_factor in the rendered settings; 0: unreplicated); sizes the data volumes."
  type        = number
  default     = 0
}

variable "write_mb_per_s" {
  description = "Expected write rate into the cluster, MB/s (sizes the data volumes)."
  type        = number
}

variable "retention_hours" {
  description = "Retention of the brokers (must match log.retention_ms in the rendered settings)."
  type        = number
  default     = 168
}

variable "broker_instance_type" {
  description = "EC2 instance type of a broker."
  type        = string
  default     = "m6i.xlarge"
}

variable "ami_id" {
  description = "A Debian 12 AMI of the region."
  type        = string
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}

variable "zookeeper_secret_arns" {
  description = "The secrets ZooKeeper's instances read at boot (module secrets; in this region: the replica's ARN, or a region of \"*\"): [] for none."
  type        = list(string)
  default     = []
}

variable "broker_secret_arns" {
  description = "The secrets the brokers read at boot (as zookeeper_secret_arns): [] for none."
  type        = list(string)
  default     = []
}

variable "secrets_kms_key_arn" {
  description = "The KMS key that encrypts those secrets in this region; null: this datacenter's own key (which encrypts the replicas made here)."
  type        = string
  default     = null
}

variable "secrets_name" {
  description = "The environment's secrets (module secrets' name, e.g. samsa-prod), read at boot: its ZooKeeper and brokers run secured (docs/security.md, \"In the cloud\"). \"\": they run open."
  type        = string
}
