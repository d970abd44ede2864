output "security_group_id" {
  description = "The mirror's security group (the analysis brokers admit it)."
  value       = module.service.security_group_id
}

output "instance_ids" {
  description = "The mirror processes' instances."
  value       = module.service.instance_ids
}
