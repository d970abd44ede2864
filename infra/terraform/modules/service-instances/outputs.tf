output "security_group_id" {
  description = "The service's security group (add ingress rules for its clients)."
  value       = aws_security_group.this.id
}

output "instance_ids" {
  description = "The instances, instance i at index i."
  value       = aws_instance.this[*].id
}

output "private_ips" {
  description = "The instances' private addresses."
  value       = aws_instance.this[*].private_ip
}

output "availability_zones" {
  description = "Each instance's availability zone."
  value       = aws_instance.this[*].availability_zone
}

output "data_volume_ids" {
  description = "Each instance's data volume (none without data_volume_gb)."
  value       = aws_ebs_volume.data[*].id
}
