# The audit service (python -m audit serve) on one instance, its database a
# PostgreSQL (module postgres) whose master password RDS keeps in Secrets
# Manager: no password in a variable, in the state or in user data.

locals {
  tags = merge(var.tags, { "samsa:module" = "audit" })
}

module "database" {
  source                   = "../postgres"
  name                     = "${var.name}-audit"
  database                 = "audit"
  vpc_id                   = var.vpc_id
  subnet_ids               = var.subnet_ids
  client_security_group_id = module.service.security_group_id
  instance_class           = var.db_instance_class
  allocated_gb             = var.db_allocated_gb
  multi_az                 = var.db_multi_az
  backup_days              = var.db_backup_days
  kms_key_arn              = var.kms_key_arn
  tags                     = local.tags
}

data "aws_iam_policy_document" "audit" {
  statement {
    sid       = "ReadTheDatabaseSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [module.database.secret_arn]
  }
  statement {
    sid       = "DecryptIt"
    actions   = ["kms:Decrypt"]
    resources = [var.kms_key_arn]
  }
}

module "service" {
  source        = "../service-instances"
  name          = "${var.name}-audit"
  description   = "Samsa audit service: reports and API to readers"
  vpc_id        = var.vpc_id
  subnet_ids    = var.subnet_ids
  instance_type = var.instance_type
  ami_id        = var.ami_id
  kms_key_arn   = var.kms_key_arn
  policy_json   = data.aws_iam_policy_document.audit.json
  wheel_url     = var.samsa_wheel_url
  user_data = [templatefile("${path.module}/user_data.sh.tftpl", {
    zookeeper       = var.zookeeper_connect
    db_host         = module.database.address
    db_secret_arn   = module.database.secret_arn
    samsa_wheel_url = var.samsa_wheel_url
  })]
  tags = local.tags

  # the secrets it reads at boot (module secrets)
  secret_arns          = var.secret_arns
  secrets_kms_key_arns = var.secrets_kms_key_arns
}

resource "aws_vpc_security_group_ingress_rule" "readers" {
  for_each          = toset(var.reader_cidrs)
  security_group_id = module.service.security_group_id
  description       = "Report pages and /api (the DAGs, operators)"
  ip_protocol       = "tcp"
  from_port         = 8090
  to_port           = 8090
  cidr_ipv4         = each.value
}
