output "role_arn" {
  description = "The role's ARN."
  value       = aws_iam_role.this.arn
}

output "instance_profile_name" {
  description = "The instance profile to give the service's instances."
  value       = aws_iam_instance_profile.this.name
}
