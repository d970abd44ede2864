output "url" {
  description = "The audit report (heatmap), /api/verdicts and /metrics, inside the VPC: HTTPS when secured (secrets_name), its certificate issued for this address."
  value       = "${var.secrets_name != "" ? "https" : "http"}://${module.service.private_ips[0]}:8090"
}

output "security_group_id" {
  description = "The audit service's security group."
  value       = module.service.security_group_id
}

output "db_secret_arn" {
  description = "The Secrets Manager secret holding the database's master password (RDS rotates it)."
  value       = module.database.secret_arn
}
