# The environment's shape, named as the cloud environments name it.

variable "datacenters" {
  description = "Producer datacenters: one Samsa cluster behind a load balancer each."
  type        = list(string)
  default     = ["dc-a", "dc-b"]
  validation {
    condition     = length(var.datacenters) >= 1 && alltrue([for d in var.datacenters : can(regex("^[a-z][a-z0-9-]*$", d))]) && !contains(var.datacenters, "analysis")
    error_message = "datacenters: one or more names of lower-case letters, digits and '-', not \"analysis\"."
  }
}

variable "brokers_per_dc" {
  description = "Brokers in each producer datacenter's cluster."
  type        = number
  default     = 2
  validation {
    condition     = var.brokers_per_dc >= 1 && var.brokers_per_dc <= 40
    error_message = "brokers_per_dc must be between 1 and 40 (the port layout's limit)."
  }
}

variable "analysis_brokers" {
  description = "Brokers in the analysis cluster."
  type        = number
  default     = 2
  validation {
    condition     = var.analysis_brokers >= 1 && var.analysis_brokers <= 40
    error_message = "analysis_brokers must be between 1 and 40."
  }
}

variable "replication_factor" {
  description = "Replicas of every partition in every cluster (docs/replication.md); 0 keeps one copy per broker's own partitions, as the paper's brokers did."
  type        = number
  default     = 2
  validation {
    condition     = var.replication_factor >= 0 && var.replication_factor <= min(var.brokers_per_dc, var.analysis_brokers)
    error_message = "replication_factor must be between 0 and the brokers of the smallest cluster (brokers_per_dc, analysis_brokers): each replica lives on another broker."
  }
}

variable "partitions" {
  description = "Partitions per broker of an automatically created topic (default_partitions; a replicated cluster makes partitions x brokers in all)."
  type        = number
  default     = 2
  validation {
    condition     = var.partitions >= 1
    error_message = "partitions must be at least 1."
  }
}

variable "retention_hours" {
  description = "How long brokers keep messages (log.retention_ms)."
  type        = number
  default     = 168
  validation {
    condition     = var.retention_hours > 0
    error_message = "retention_hours must be positive."
  }
}

variable "mirror_whitelist" {
  description = "Topics the mirror copies into the analysis cluster (a regular expression over whole names)."
  type        = string
  default     = ".*"
}

variable "mirror_processes" {
  description = "Mirror processes sharing the copy (one consumer group)."
  type        = number
  default     = 2
  validation {
    condition     = var.mirror_processes >= 1 && var.mirror_processes <= 10
    error_message = "mirror_processes must be between 1 and 10."
  }
}

variable "airflow" {
  description = "Run a local Airflow with the warehouse DAGs (make airflow-up's)."
  type        = bool
  default     = true
}

variable "runtime" {
  description = "How the components run: \"processes\" of this checkout, or \"containers\" of the project's images (make images: samsa/zookeeper, samsa/samsa, samsa/haproxy, samsa/analysis for Airflow; host networking)."
  type        = string
  default     = "processes"
  validation {
    condition     = contains(["processes", "containers"], var.runtime)
    error_message = "runtime must be \"processes\" or \"containers\"."
  }
}

variable "base_port" {
  description = "Every port of the environment is laid out from here (infra/topology.py)."
  type        = number
  default     = 21000
  validation {
    condition     = var.base_port >= 1024 && var.base_port <= 60000
    error_message = "base_port must be between 1024 and 60000."
  }
}

variable "state_dir" {
  description = "Where the processes keep their state, logs and data (default .tf-local in the checkout)."
  type        = string
  default     = ""
}

variable "python" {
  description = "The Python with Samsa installed (default: the checkout's .venv/bin/python, which make setup makes; else python3)."
  type        = string
  default     = ""
}

variable "project_dir" {
  description = "The Samsa checkout the commands run in (default: four levels above this directory)."
  type        = string
  default     = ""
}
