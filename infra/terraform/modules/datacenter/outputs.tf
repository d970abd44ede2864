output "load_balancer_address" {
  description = "Where the datacenter's producers connect (null without a load balancer)."
  value       = var.load_balancer ? module.load_balancer[0].address : null
}

output "zookeeper_connect" {
  description = "The cluster's ZooKeeper connect string with its chroot."
  value       = module.brokers.zookeeper_connect
}

output "vpc_id" {
  description = "The datacenter's VPC (for peering)."
  value       = module.network.vpc_id
}

output "vpc_cidr" {
  description = "The datacenter VPC's range."
  value       = module.network.vpc_cidr
}

output "private_route_table_ids" {
  description = "Private route tables (for peering routes)."
  value       = module.network.private_route_table_ids
}

output "broker_security_group_id" {
  description = "The brokers' security group."
  value       = module.brokers.security_group_id
}

output "data_volume_gb" {
  description = "Each broker's data volume size."
  value       = module.brokers.data_volume_gb
}

output "private_subnet_ids" {
  description = "The datacenter's private subnets (for the services placed beside the cluster)."
  value       = module.network.private_subnet_ids
}

output "kms_key_arn" {
  description = "The datacenter's KMS key (volumes, database)."
  value       = aws_kms_key.volumes.arn
}
