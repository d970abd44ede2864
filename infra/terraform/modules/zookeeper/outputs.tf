output "connect_string" {
  description = "The ensemble's connect string (host:2181,...), without a chroot: each cluster adds its own (\"/dc-a\")."
  value       = join(",", [for ip in local.member_ips : "${ip}:2181"])
}

output "security_group_id" {
  description = "The members' security group."
  value       = module.service.security_group_id
}

output "instance_ids" {
  description = "The members' instances, member i + 1 at index i."
  value       = module.service.instance_ids
}

output "data_volume_ids" {
  description = "Each instance's data volume: a volume of its own in its subnet's zone, which outlives the instance (and no plan may destroy)."
  value       = module.service.data_volume_ids
}
