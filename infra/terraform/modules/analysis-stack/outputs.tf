output "airflow_url" {
  description = "The Airflow UI and REST API, inside the VPC: HTTPS with a certificate of the environment's authority when secured (secrets_name), else HTTP."
  value       = "${var.secrets_name != "" ? "https" : "http"}://${module.service.private_ips[0]}:8080"
}

output "warehouse" {
  description = "Where the loader writes (its output setting)."
  value       = "s3a://${aws_s3_bucket.warehouse.bucket}/warehouse"
}

output "security_group_id" {
  description = "The analysis instance's security group (the analysis brokers admit it: the loader)."
  value       = module.service.security_group_id
}
