output "bucket" {
  description = "The state bucket (the environments' backend `bucket`)."
  value       = aws_s3_bucket.state.bucket
}

output "lock_table" {
  description = "The lock table (the environments' backend `dynamodb_table`)."
  value       = aws_dynamodb_table.locks.name
}

output "kms_key_arn" {
  description = "The key the state is encrypted with (the environments' backend `kms_key_id`)."
  value       = aws_kms_key.state.arn
}

output "region" {
  description = "The region of the bucket and the table."
  value       = aws_s3_bucket.state.region
}
