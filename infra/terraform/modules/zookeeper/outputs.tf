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
