output "address" {
  description = "Where the datacenter's producers connect: the load balancer's DNS name and port."
  value       = "${aws_lb.this.dns_name}:${var.port}"
}

output "security_group_id" {
  description = "The load balancer's security group (the brokers admit it)."
  value       = aws_security_group.lb.id
}

output "arn" {
  description = "The load balancer's ARN."
  value       = aws_lb.this.arn
}

output "dns_name" {
  description = "The load balancer's DNS name: what producers dial, so the brokers' certificates name it too."
  value       = aws_lb.this.dns_name
}
