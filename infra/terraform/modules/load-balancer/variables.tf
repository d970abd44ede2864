variable "name" {
  description = "Name prefix (an NLB name is at most 32 characters: keep it short, e.g. \"samsa-prod-dc-a\")."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,23}$", var.name))
    error_message = "name: 2-24 lower-case letters, digits and '-', starting with a letter (the target group, NAME-brokers, must fit AWS's 32)."
  }
}

variable "vpc_id" {
  description = "The datacenter's VPC."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets the load balancer listens in (producers reach it inside the datacenter)."
  type        = list(string)
}

variable "broker_private_ips" {
  description = "The brokers' addresses (module broker-cluster), registered as targets."
  type        = list(string)
}

variable "producer_cidrs" {
  description = "Who may connect: the producers' networks. Never 0.0.0.0/0."
  type        = list(string)
  validation {
    condition     = length(var.producer_cidrs) > 0 && alltrue([for c in var.producer_cidrs : try(can(regex("^[0-9.]+/[0-9]+$", c)) && cidrhost(c, 0) != "" && tonumber(split("/", c)[1]) >= 8, false)])
    error_message = "producer_cidrs: one or more IPv4 ranges (a.b.c.d/n), each /8 or narrower: never the whole internet, in any spelling (0.0.0.0/0, 0.0.0.0/1, ...)."
  }
}

variable "port" {
  description = "The port producers connect to (the brokers' port behind it is 9092)."
  type        = number
  default     = 9092
  validation {
    condition     = var.port >= 1 && var.port <= 65535 && floor(var.port) == var.port
    error_message = "port: a TCP port, 1 to 65535."
  }
}

variable "health_check" {
  description = "TCP health check of each broker, as the lab's HAProxy has it (infra/topology.py LoadBalancerSpec): interval, timeout (below the interval, as AWS requires: its TCP default of 10 s is refused with a 5 s interval), fall (failures to mark DOWN), rise (successes to mark UP). AWS allows intervals of 5 s and more: the lab's 0.5 s becomes 5 s."
  type = object({
    interval_seconds = number
    timeout_seconds  = number
    fall             = number
    rise             = number
  })
  default = { interval_seconds = 5, timeout_seconds = 3, fall = 2, rise = 2 }
  validation {
    condition     = var.health_check.interval_seconds >= 5 && var.health_check.interval_seconds <= 300 && var.health_check.timeout_seconds >= 2 && var.health_check.timeout_seconds < var.health_check.interval_seconds && var.health_check.timeout_seconds <= 120 && var.health_check.fall >= 2 && var.health_check.fall <= 10 && var.health_check.rise >= 2 && var.health_check.rise <= 10
    error_message = "health_check: interval 5-300 s, timeout 2-120 s and below the interval, fall and rise 2-10 (the NLB's limits)."
  }
}

variable "idle_timeout_seconds" {
  description = "How long an idle connection stays open: above the brokers' longest long-poll (max_fetch_wait_ms, 30 s); the lab's HAProxy allows 60 s."
  type        = number
  default     = 350
  validation {
    condition     = var.idle_timeout_seconds >= 60 && var.idle_timeout_seconds <= 6000 && floor(var.idle_timeout_seconds) == var.idle_timeout_seconds
    error_message = "idle_timeout_seconds: a whole number from 60 to 6000 (an NLB TCP listener's range)."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
