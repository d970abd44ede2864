variable "name" {
  description = "Name prefix of every resource (e.g. \"samsa-prod-us-east-1\")."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,40}$", var.name))
    error_message = "name: 2-41 lower-case letters, digits and '-', starting with a letter."
  }
}

variable "cidr" {
  description = "The VPC's IPv4 range; one private and one public subnet per availability zone are cut from it, each 4 bits longer in prefix (a /20 of a /16)."
  type        = string
  default     = "10.20.0.0/16"
  validation {
    condition     = can(cidrhost(var.cidr, 0)) && tonumber(split("/", var.cidr)[1]) <= 18
    error_message = "cidr must be an IPv4 CIDR block of /18 or larger."
  }
}

variable "availability_zones" {
  description = "Availability zones to spread the subnets (and so the brokers and ZooKeeper members) over."
  type        = list(string)
  validation {
    condition     = length(var.availability_zones) >= 2 && length(var.availability_zones) <= 6
    error_message = "Give 2 to 6 availability zones."
  }
}

variable "flow_log_retention_days" {
  description = "How long the VPC flow logs are kept in CloudWatch Logs."
  type        = number
  default     = 365
  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, 3653], var.flow_log_retention_days)
    error_message = "flow_log_retention_days must be a CloudWatch Logs retention value."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
