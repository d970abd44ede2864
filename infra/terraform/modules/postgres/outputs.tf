output "address" {
  description = "The database's host name (inside the VPC)."
  value       = aws_db_instance.this.address
}

output "secret_arn" {
  description = "The Secrets Manager secret holding the master password (RDS manages and rotates it)."
  value       = aws_db_instance.this.master_user_secret[0].secret_arn
}

output "security_group_id" {
  description = "The database's security group."
  value       = aws_security_group.db.id
}

output "database" {
  description = "The database's name, which is also its master user's (the secret RDS keeps holds both: username and password)."
  value       = aws_db_instance.this.db_name
}

output "port" {
  description = "The database's port."
  value       = aws_db_instance.this.port
}
