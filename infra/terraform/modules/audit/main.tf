# The audit service (python -m audit serve, the samsa/samsa image) on one
# instance, its database a PostgreSQL (module postgres) whose master user and
# password RDS keeps (and rotates) in Secrets Manager: no password in a
# variable, in the state or in user data; the instance reads that secret at
# boot and again every minute (user_data.sh.tftpl).

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
  policies      = { service = data.aws_iam_policy_document.audit.json }
  user_data = [templatefile("${path.module}/user_data.sh.tftpl", {
    boot_common      = file("${path.module}/../../boot/common.sh")
    ssm_agent_base   = local.ssm_agent_base
    metadata_url     = "http://169.254.169.254"
    image            = var.image
    secrets          = var.secrets_name
    secrets_endpoint = ""
    zookeeper        = var.zookeeper_connect
    # the database RDS made: its master user (the database's name, module
    # postgres) and password are in the secret it keeps and rotates
    db_host       = module.database.address
    db_port       = module.database.port
    db_name       = module.database.database
    db_secret_arn = module.database.secret_arn
    config_dir    = "/etc/samsa"
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

# Amazon's SSM agent, from the region's bucket (boot/common.sh install_ssm_agent)
data "aws_region" "ssm" {}

locals {
  ssm_agent_base = "https://amazon-ssm-${data.aws_region.ssm.name}.s3.${data.aws_region.ssm.name}.amazonaws.com/latest"
}
