output "security_group_id" {
  description = "The brokers' security group."
  value       = aws_security_group.broker.id
}

output "broker_private_ips" {
  description = "The brokers' private addresses, broker i at index i (targets of the load balancer)."
  value       = aws_instance.broker[*].private_ip
}

output "instance_ids" {
  description = "The brokers' instances, broker i at index i."
  value       = aws_instance.broker[*].id
}

output "zookeeper_connect" {
  description = "The cluster's ZooKeeper connect string with its chroot."
  value       = local.zookeeper_with_root
}

output "data_volume_gb" {
  description = "Each broker's data volume size (the formula in the README, or the override)."
  value       = local.data_volume_gb
}
