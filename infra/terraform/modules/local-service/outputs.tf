output "id" {
  description = "The component resource's id (changes when it is replaced)."
  value       = terraform_data.service.id
}

output "name" {
  description = "The component's name."
  value       = var.name
}
