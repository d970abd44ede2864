# Staging: one producer datacenter and the analysis datacenter in one region,
# small instances, the same modules as production.

provider "aws" {
  region = var.datacenters["dc-staging"]

  default_tags {
    tags = var.tags
  }
}

data "aws_availability_zones" "this" {
  state = "available"
}

locals {
  analysis_cidr = "10.130.0.0/16"
}

module "dc_staging" {
  source               = "../../modules/datacenter"
  zookeeper_image      = "${local.image_registry}/samsa/zookeeper:${var.image_version}"
  name                 = "samsa-stg-dc"
  cluster              = "dc-staging"
  cidr                 = "10.110.0.0/16"
  availability_zones   = slice(data.aws_availability_zones.this.names, 0, 2)
  zookeeper_size       = 3
  brokers              = var.brokers_per_dc
  replication_factor   = var.replication_factor
  remote_client_cidrs  = { mirror = local.analysis_cidr }
  broker_config_toml   = file("${path.module}/rendered/broker-dc-staging.toml")
  broker_acls_toml     = file("${path.module}/rendered/acls-dc-staging.toml")
  samsa_image          = "${local.image_registry}/samsa/samsa:${var.image_version}"
  secrets_name         = module.secrets.name
  write_mb_per_s       = var.write_mb_per_s
  retention_hours      = var.retention_hours
  broker_instance_type = "t3.large"
  ami_id               = var.ami_ids[var.datacenters["dc-staging"]]
  tags                 = var.tags

  # the secrets it reads at boot (module secrets)
  zookeeper_secret_arns = local.secret_arns.zookeeper
  broker_secret_arns    = local.secret_arns.broker
  # one region: the secrets themselves, encrypted with the analysis datacenter's key
  secrets_kms_key_arn = module.analysis.kms_key_arn
}

module "analysis" {
  source             = "../../modules/datacenter"
  zookeeper_image    = "${local.image_registry}/samsa/zookeeper:${var.image_version}"
  name               = "samsa-stg-analysis"
  cluster            = "analysis"
  cidr               = local.analysis_cidr
  availability_zones = slice(data.aws_availability_zones.this.names, 0, 2)
  zookeeper_size     = 3
  brokers            = var.analysis_brokers
  replication_factor = var.replication_factor
  load_balancer      = false
  local_client_security_group_ids = {
    mirror = module.mirror.security_group_id
    audit  = module.audit.security_group_id
    loader = module.analysis_stack.security_group_id
  }
  broker_config_toml   = file("${path.module}/rendered/broker-analysis.toml")
  broker_acls_toml     = file("${path.module}/rendered/acls-analysis.toml")
  samsa_image          = "${local.image_registry}/samsa/samsa:${var.image_version}"
  secrets_name         = module.secrets.name
  write_mb_per_s       = var.write_mb_per_s
  retention_hours      = var.retention_hours
  broker_instance_type = "t3.large"
  ami_id               = var.ami_ids[var.analysis_region]
  tags                 = var.tags

  # the secrets it reads at boot (module secrets)
  zookeeper_secret_arns = local.secret_arns.zookeeper
  broker_secret_arns    = local.secret_arns.broker
}

module "peering" {
  source    = "../../modules/peering"
  providers = { aws.requester = aws, aws.accepter = aws }
  name      = "samsa-stg-analysis-dc"
  requester = { vpc_id = module.analysis.vpc_id, cidr = module.analysis.vpc_cidr, route_table_ids = module.analysis.private_route_table_ids }
  accepter  = { vpc_id = module.dc_staging.vpc_id, cidr = module.dc_staging.vpc_cidr, route_table_ids = module.dc_staging.private_route_table_ids, region = var.datacenters["dc-staging"] }
  tags      = var.tags
}

# the analysis datacenter's services: the mirror, the audit service, Airflow and the loader
module "mirror" {
  source                 = "../../modules/mirror"
  name                   = "samsa-stg-analysis"
  processes              = var.mirror_processes
  vpc_id                 = module.analysis.vpc_id
  subnet_ids             = module.analysis.private_subnet_ids
  mirror_config_template = file("${path.module}/rendered/mirror-to-analysis.toml")
  zookeeper_connect = {
    dc_staging = module.dc_staging.zookeeper_connect,
    analysis   = module.analysis.zookeeper_connect
  }
  image        = "${local.image_registry}/samsa/samsa:${var.image_version}"
  secrets_name = module.secrets.name
  ami_id       = var.ami_ids[var.analysis_region]
  kms_key_arn  = module.analysis.kms_key_arn
  tags         = var.tags

  # the secrets it reads at boot (module secrets)
  secret_arns          = local.secret_arns.mirror
  secrets_kms_key_arns = [module.analysis.kms_key_arn]
}

module "audit" {
  source            = "../../modules/audit"
  name              = "samsa-stg-analysis"
  vpc_id            = module.analysis.vpc_id
  subnet_ids        = module.analysis.private_subnet_ids
  zookeeper_connect = module.analysis.zookeeper_connect
  reader_cidrs      = concat([module.analysis.vpc_cidr], var.operator_cidrs)
  db_multi_az       = false
  image             = "${local.image_registry}/samsa/samsa:${var.image_version}"
  secrets_name      = module.secrets.name
  ami_id            = var.ami_ids[var.analysis_region]
  kms_key_arn       = module.analysis.kms_key_arn
  tags              = var.tags

  # the secrets it reads at boot (module secrets)
  secret_arns          = local.secret_arns.audit
  secrets_kms_key_arns = [module.analysis.kms_key_arn]
}

module "analysis_stack" {
  source            = "../../modules/analysis-stack"
  name              = "samsa-stg-analysis"
  vpc_id            = module.analysis.vpc_id
  subnet_ids        = module.analysis.private_subnet_ids
  zookeeper_connect = module.analysis.zookeeper_connect
  audit_url         = module.audit.url
  ui_cidrs          = length(var.operator_cidrs) > 0 ? var.operator_cidrs : [module.analysis.vpc_cidr]
  warehouse_bucket  = var.warehouse_bucket
  image             = "${local.image_registry}/samsa/analysis:${var.image_version}"
  secrets_name      = module.secrets.name
  ami_id            = var.ami_ids[var.analysis_region]
  kms_key_arn       = module.analysis.kms_key_arn
  tags              = var.tags

  # the secrets it reads at boot (module secrets)
  secret_arns          = local.secret_arns.analysis
  secrets_kms_key_arns = [module.analysis.kms_key_arn]
}

# the environment's registry (module registry): an ECR repository per image
# the instances run, in the analysis region (the other regions pull from it)
module "registry" {
  source      = "../../modules/registry"
  kms_key_arn = module.analysis.kms_key_arn
  tags        = var.tags
}

locals {
  image_registry = var.image_registry != "" ? var.image_registry : module.registry.registry
}
