output "secret_arns" {
  description = "Each secret's ARN in the primary region, by name (\"ca\", \"ca-certificate\", \"users/mirror\", \"zookeeper/cluster\", \"http/admin\", ...)."
  value = merge(
    { for k, s in aws_secretsmanager_secret.generated : k => s.arn },
    { for k, s in aws_secretsmanager_secret.operator_put : k => s.arn },
  )
}

output "readers" {
  description = "Who reads which secret at boot, by service (zookeeper, broker, mirror, audit, analysis): the secrets' names."
  value       = local.readers
}

output "reader_secret_arns" {
  description = "The ARNs each service may read, by service as in readers, in the primary region."
  value = { for reader, names in local.readers : reader => [
    for n in names : merge(
      { for k, s in aws_secretsmanager_secret.generated : k => s.arn },
      { for k, s in aws_secretsmanager_secret.operator_put : k => s.arn },
  )[n]] }
}

output "reader_secret_arns_any_region" {
  description = "As reader_secret_arns, with the region left open (\"*\"): a replica's ARN is its secret's but for the region."
  value = { for reader, names in local.readers : reader => [
    for n in names : join(":", [for i, part in split(":", merge(
      { for k, s in aws_secretsmanager_secret.generated : k => s.arn },
      { for k, s in aws_secretsmanager_secret.operator_put : k => s.arn },
  )[n]) : i == 3 ? "*" : part])] }
}

output "secret_names" {
  description = "Each secret's name (the same in every replica region), by the same keys as secret_arns."
  value = merge(
    { for k, s in aws_secretsmanager_secret.generated : k => s.name },
    { for k, s in aws_secretsmanager_secret.operator_put : k => s.name },
  )
}

output "name" {
  description = "The secrets' prefix (their names are NAME/...): what the hosts read at boot (secrets_name of the modules that boot from it)."
  value       = var.name
}
