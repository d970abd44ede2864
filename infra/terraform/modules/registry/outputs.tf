output "registry" {
  description = "The registry's host (ACCOUNT.dkr.ecr.REGION.amazonaws.com): the environments' image_registry, make push-images' REGISTRY."
  value       = split("/", values(aws_ecr_repository.image)[0].repository_url)[0]
}

output "repository_arns" {
  description = "The repositories' ARNs, by image."
  value       = { for name, repository in aws_ecr_repository.image : name => repository.arn }
}
