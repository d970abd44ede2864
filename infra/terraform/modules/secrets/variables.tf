variable "name" {
  description = "The prefix of every secret's name (\"samsa-prod\": samsa-prod/users/mirror, ...)."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9_+=.@-]{1,40}$", var.name))
    error_message = "name: 1-40 characters of letters, digits and _+=.@- (no '/')."
  }
}

variable "kms_key_arn" {
  description = "The KMS key that encrypts every secret in this (the primary) region."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:kms:", var.kms_key_arn))
    error_message = "kms_key_arn: a KMS key's ARN."
  }
}

variable "replica_regions" {
  description = "Other regions that read the secrets (a producer datacenter's brokers read theirs there), each with the KMS key that encrypts its replicas."
  type        = map(string)
  default     = {}
  validation {
    condition = alltrue([for region, key in var.replica_regions :
    can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]$", region)) && can(regex("^arn:aws[a-z-]*:kms:", key))])
    error_message = "replica_regions: region name -> KMS key ARN."
  }
}

variable "users" {
  description = "The SCRAM-SHA-512 users of the clusters, one generated password each (docs/security.md: broker, admin, producer, mirror, lag, audit, loader)."
  type        = set(string)
  default     = ["broker", "admin", "producer", "mirror", "lag", "audit", "loader"]
  validation {
    condition     = alltrue([for u in var.users : can(regex("^[a-z][a-z0-9_-]{0,31}$", u))])
    error_message = "users: lower-case names of up to 32 characters."
  }
  validation {
    condition     = length(setsubtract(["broker", "admin", "producer", "mirror", "lag", "audit", "loader"], var.users)) == 0
    error_message = "users: the services' own (broker, admin, producer, mirror, lag, audit, loader) and any more."
  }
}

variable "zookeeper_identities" {
  description = "The ZooKeeper digest identities of the writers (cluster, mirror, registry, audit, loader), one generated password each."
  type        = set(string)
  default     = ["cluster", "mirror", "registry", "audit", "loader"]
  validation {
    condition     = alltrue([for u in var.zookeeper_identities : can(regex("^[a-z][a-z0-9_-]{0,31}$", u))])
    error_message = "zookeeper_identities: lower-case names of up to 32 characters."
  }
  validation {
    condition     = length(setsubtract(["cluster", "mirror", "registry", "audit", "loader"], var.zookeeper_identities)) == 0
    error_message = "zookeeper_identities: the services' own (cluster, mirror, registry, audit, loader) and any more."
  }
}

variable "http_users" {
  description = "The users of the HTTP services (the audit, the lag service, the schema registry, /metrics), one generated password each."
  type        = set(string)
  default     = ["prometheus", "airflow", "admin"]
  validation {
    condition     = alltrue([for u in var.http_users : can(regex("^[a-z][a-z0-9_-]{0,31}$", u))])
    error_message = "http_users: lower-case names of up to 32 characters."
  }
}

variable "password_generation" {
  description = "Bump to generate every password anew (a rotation: the new values reach the services at their next start; docs/security.md, \"In the cloud\")."
  type        = number
  default     = 1
  validation {
    condition     = var.password_generation >= 1 && floor(var.password_generation) == var.password_generation
    error_message = "password_generation: a whole number, 1 or more."
  }
}

variable "recovery_window_days" {
  description = "How long a deleted secret can still be restored (0 deletes at once; AWS allows 7-30)."
  type        = number
  default     = 30
  validation {
    condition     = var.recovery_window_days == 0 || (var.recovery_window_days >= 7 && var.recovery_window_days <= 30)
    error_message = "recovery_window_days: 0, or 7 to 30."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}

variable "passwords_given" {
  description = "Write given_passwords rather than passwords Secrets Manager generates (false, the default)."
  type        = bool
  default     = false
}

variable "given_passwords" {
  description = "With passwords_given: the passwords to write (secret name -> password, every generated secret named; a ZooKeeper identity's without its user). Ephemeral: never in the plan or the state."
  type        = map(string)
  default     = null
  ephemeral   = true
  validation {
    condition     = var.given_passwords == null || alltrue([for k, v in coalesce(var.given_passwords, {}) : length(v) >= 16])
    error_message = "given_passwords: each at least 16 characters."
  }
}
