output "security_group_id" {
  description = "The brokers' security group."
  value       = module.service.security_group_id
}

output "broker_private_ips" {
  description = "The brokers' private addresses, broker i at index i (targets of the load balancer)."
  value       = module.service.private_ips
}

output "instance_ids" {
  description = "The brokers' instances, broker i at index i."
  value       = module.service.instance_ids
}

output "zookeeper_connect" {
  description = "The cluster's ZooKeeper connect string with its chroot."
  value       = local.zookeeper_with_root
}

output "data_volume_gb" {
  description = "Each broker's data volume size (the formula in the README, or the override)."
  value       = local.data_volume_gb
}

output "data_volume_ids" {
  description = "Each instance's data volume: a volume of its own in its subnet's zone, which outlives the instance (and no plan may destroy)."
  value       = module.service.data_volume_ids
}
