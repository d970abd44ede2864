variable "name" {
  description = "The peering's name (a tag)."
  type        = string
}

variable "requester" {
  description = "The requesting side (the analysis datacenter): its VPC, range and private route tables."
  type = object({
    vpc_id          = string
    cidr            = string
    route_table_ids = list(string)
  })
}

variable "accepter" {
  description = "The accepting side (a producer datacenter) and its region."
  type = object({
    vpc_id          = string
    cidr            = string
    route_table_ids = list(string)
    region          = string
  })
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
