# One datacenter: its network, ZooKeeper ensemble, broker cluster and (for a
# producer datacenter) the load balancer in front of it.

locals {
  tags                 = merge(var.tags, { "samsa:datacenter" = var.cluster })
  secrets_kms_key_arns = [coalesce(var.secrets_kms_key_arn, aws_kms_key.volumes.arn)]
}

data "aws_caller_identity" "current" {}

# the account administers the key through IAM; the services use it through
# their roles' policies and the grants EC2 and RDS make
data "aws_iam_policy_document" "volumes_key" {
  statement {
    sid       = "AccountAdministers"
    actions   = ["kms:*"]
    resources = ["*"] # in a key policy, "*" is this key
    principals {
      type        = "AWS"
      identifiers = ["arn:aws:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }
}

resource "aws_kms_key" "volumes" {
  description         = "${var.name}: Samsa volumes, databases, secrets, the warehouse"
  enable_key_rotation = true
  policy              = data.aws_iam_policy_document.volumes_key.json
  tags                = local.tags
}

module "network" {
  source             = "../network"
  name               = var.name
  cidr               = var.cidr
  availability_zones = var.availability_zones
  tags               = local.tags
}

module "zookeeper" {
  source = "../zookeeper"
  name   = var.name
  size   = var.zookeeper_size
  image  = var.zookeeper_image
  # its members' secrets read with samsa/samsa's host_secrets at boot
  tools_image  = var.samsa_image
  secrets_name = var.secrets_name
  vpc_id       = module.network.vpc_id
  subnet_ids   = module.network.private_subnet_ids
  # its own VPC, and the other-region clients (the mirror's consumer group
  # coordinates in each source cluster's ZooKeeper)
  client_cidrs = concat([module.network.vpc_cidr], values(var.remote_client_cidrs))
  ami_id       = var.ami_id
  kms_key_arn  = aws_kms_key.volumes.arn
  tags         = local.tags

  # the secrets it reads at boot (module secrets)
  secret_arns          = var.zookeeper_secret_arns
  secrets_kms_key_arns = local.secrets_kms_key_arns
}

module "load_balancer" {
  source             = "../load-balancer"
  count              = var.load_balancer ? 1 : 0
  name               = var.name
  vpc_id             = module.network.vpc_id
  subnet_ids         = module.network.private_subnet_ids
  broker_private_ips = module.brokers.broker_private_ips
  producer_cidrs     = length(var.producer_cidrs) > 0 ? var.producer_cidrs : [module.network.vpc_cidr]
  tags               = local.tags
}

module "brokers" {
  source            = "../broker-cluster"
  name              = var.name
  cluster           = var.cluster
  brokers           = var.brokers
  vpc_id            = module.network.vpc_id
  subnet_ids        = module.network.private_subnet_ids
  zookeeper_connect = module.zookeeper.connect_string
  client_security_group_ids = merge(
    var.local_client_security_group_ids,
    var.load_balancer ? { load_balancer = module.load_balancer[0].security_group_id } : {},
  )
  client_cidrs       = var.remote_client_cidrs
  broker_config_toml = var.broker_config_toml
  acls_toml          = var.broker_acls_toml
  image              = var.samsa_image
  secrets_name       = var.secrets_name
  # producers dial the load balancer's name over TLS: the brokers' certificates name it
  certificate_names  = var.load_balancer ? [module.load_balancer[0].dns_name] : []
  write_mb_per_s     = var.write_mb_per_s
  replication_factor = var.replication_factor
  retention_hours    = var.retention_hours
  instance_type      = var.broker_instance_type
  ami_id             = var.ami_id
  kms_key_arn        = aws_kms_key.volumes.arn
  tags               = local.tags

  # the secrets it reads at boot (module secrets)
  secret_arns          = var.broker_secret_arns
  secrets_kms_key_arns = local.secrets_kms_key_arns
}
