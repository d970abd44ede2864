output "vpc_id" {
  description = "The VPC's id."
  value       = aws_vpc.this.id
}

output "vpc_cidr" {
  description = "The VPC's IPv4 range (security groups admit ZooKeeper clients from it)."
  value       = aws_vpc.this.cidr_block
}

output "private_subnet_ids" {
  description = "Private subnets, one per availability zone, in the order of availability_zones."
  value       = aws_subnet.private[*].id
}

output "public_subnet_ids" {
  description = "Public subnets (NAT gateways only)."
  value       = aws_subnet.public[*].id
}

output "private_route_table_ids" {
  description = "Route tables of the private subnets (for VPC peering routes between datacenters)."
  value       = aws_route_table.private[*].id
}

output "s3_endpoint_id" {
  description = "The S3 gateway endpoint routed from the private subnets."
  value       = aws_vpc_endpoint.s3.id
}
