# Production: two producer datacenters (regions) and the analysis datacenter,
# their VPCs peered so that the analysis region's mirrors pull from each
# datacenter's brokers. The brokers' settings are rendered from topology.toml
# (python -m infra.render: rendered/), the one source of truth with the lab.

provider "aws" {
  alias  = "dc_us_east"
  region = var.datacenters["dc-us-east"]

  default_tags {
    tags = var.tags
  }
}

provider "aws" {
  alias  = "dc_eu_west"
  region = var.datacenters["dc-eu-west"]

  default_tags {
    tags = var.tags
  }
}

provider "aws" {
  alias  = "analysis"
  region = var.analysis_region

  default_tags {
    tags = var.tags
  }
}

data "aws_availability_zones" "dc_us_east" {
  provider = aws.dc_us_east
  state    = "available"
}

data "aws_availability_zones" "dc_eu_west" {
  provider = aws.dc_eu_west
  state    = "available"
}

data "aws_availability_zones" "analysis" {
  provider = aws.analysis
  state    = "available"
}

locals {
  analysis_cidr = "10.30.0.0/16"
  # the mirrors run in the analysis VPC's private subnets and pull from every datacenter
  mirror_clients = { mirror = local.analysis_cidr }
}

module "dc_us_east" {
  source              = "../../modules/datacenter"
  zookeeper_image     = "${local.image_registry}/samsa/zookeeper:${var.image_version}"
  providers           = { aws = aws.dc_us_east }
  name                = "samsa-prod-use1"
  cluster             = "dc-us-east"
  cidr                = "10.10.0.0/16"
  availability_zones  = slice(data.aws_availability_zones.dc_us_east.names, 0, 3)
  brokers             = var.brokers_per_dc
  replication_factor  = var.replication_factor
  remote_client_cidrs = local.mirror_clients
  broker_config_toml  = file("${path.module}/rendered/broker-dc-us-east.toml")
  broker_acls_toml    = file("${path.module}/rendered/acls-dc-us-east.toml")
  samsa_image         = "${local.image_registry}/samsa/samsa:${var.image_version}"
  secrets_name        = module.secrets.name
  write_mb_per_s      = var.write_mb_per_s
  retention_hours     = var.retention_hours
  ami_id              = var.ami_ids[var.datacenters["dc-us-east"]]
  tags                = var.tags

  # the secrets it reads at boot (module secrets)
  zookeeper_secret_arns = local.replica_secret_arns.zookeeper
  broker_secret_arns    = local.replica_secret_arns.broker
}

module "dc_eu_west" {
  source              = "../../modules/datacenter"
  zookeeper_image     = "${local.image_registry}/samsa/zookeeper:${var.image_version}"
  providers           = { aws = aws.dc_eu_west }
  name                = "samsa-prod-euw1"
  cluster             = "dc-eu-west"
  cidr                = "10.20.0.0/16"
  availability_zones  = slice(data.aws_availability_zones.dc_eu_west.names, 0, 3)
  brokers             = var.brokers_per_dc
  replication_factor  = var.replication_factor
  remote_client_cidrs = local.mirror_clients
  broker_config_toml  = file("${path.module}/rendered/broker-dc-eu-west.toml")
  broker_acls_toml    = file("${path.module}/rendered/acls-dc-eu-west.toml")
  samsa_image         = "${local.image_registry}/samsa/samsa:${var.image_version}"
  secrets_name        = module.secrets.name
  write_mb_per_s      = var.write_mb_per_s
  retention_hours     = var.retention_hours
  ami_id              = var.ami_ids[var.datacenters["dc-eu-west"]]
  tags                = var.tags

  # the secrets it reads at boot (module secrets)
  zookeeper_secret_arns = local.replica_secret_arns.zookeeper
  broker_secret_arns    = local.replica_secret_arns.broker
}

module "analysis" {
  source             = "../../modules/datacenter"
  zookeeper_image    = "${local.image_registry}/samsa/zookeeper:${var.image_version}"
  providers          = { aws = aws.analysis }
  name               = "samsa-prod-analysis"
  cluster            = "analysis"
  cidr               = local.analysis_cidr
  availability_zones = slice(data.aws_availability_zones.analysis.names, 0, 3)
  brokers            = var.analysis_brokers
  replication_factor = var.replication_factor
  load_balancer      = false
  local_client_security_group_ids = {
    mirror = module.mirror.security_group_id
    audit  = module.audit.security_group_id
    loader = module.analysis_stack.security_group_id
  }
  broker_config_toml = file("${path.module}/rendered/broker-analysis.toml")
  broker_acls_toml   = file("${path.module}/rendered/acls-analysis.toml")
  samsa_image        = "${local.image_registry}/samsa/samsa:${var.image_version}"
  secrets_name       = module.secrets.name
  write_mb_per_s     = var.write_mb_per_s * length(var.datacenters)
  retention_hours    = var.retention_hours
  ami_id             = var.ami_ids[var.analysis_region]
  tags               = var.tags

  # the secrets it reads at boot (module secrets)
  zookeeper_secret_arns = local.secret_arns.zookeeper
  broker_secret_arns    = local.secret_arns.broker
}

# cross-region peering: analysis <-> each producer datacenter
module "peering_us_east" {
  source    = "../../modules/peering"
  providers = { aws.requester = aws.analysis, aws.accepter = aws.dc_us_east }
  name      = "samsa-prod-analysis-use1"
  requester = { vpc_id = module.analysis.vpc_id, cidr = module.analysis.vpc_cidr, route_table_ids = module.analysis.private_route_table_ids }
  accepter  = { vpc_id = module.dc_us_east.vpc_id, cidr = module.dc_us_east.vpc_cidr, route_table_ids = module.dc_us_east.private_route_table_ids, region = var.datacenters["dc-us-east"] }
  tags      = var.tags
}

module "peering_eu_west" {
  source    = "../../modules/peering"
  providers = { aws.requester = aws.analysis, aws.accepter = aws.dc_eu_west }
  name      = "samsa-prod-analysis-euw1"
  requester = { vpc_id = module.analysis.vpc_id, cidr = module.analysis.vpc_cidr, route_table_ids = module.analysis.private_route_table_ids }
  accepter  = { vpc_id = module.dc_eu_west.vpc_id, cidr = module.dc_eu_west.vpc_cidr, route_table_ids = module.dc_eu_west.private_route_table_ids, region = var.datacenters["dc-eu-west"] }
  tags      = var.tags
}

# the analysis datacenter's services: the mirror, the audit service, Airflow and the loader
module "mirror" {
  source                 = "../../modules/mirror"
  providers              = { aws = aws.analysis }
  name                   = "samsa-prod-analysis"
  processes              = var.mirror_processes
  vpc_id                 = module.analysis.vpc_id
  subnet_ids             = module.analysis.private_subnet_ids
  mirror_config_template = file("${path.module}/rendered/mirror-to-analysis.toml")
  zookeeper_connect = {
    dc_us_east = module.dc_us_east.zookeeper_connect,
    dc_eu_west = module.dc_eu_west.zookeeper_connect,
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
  providers         = { aws = aws.analysis }
  name              = "samsa-prod-analysis"
  vpc_id            = module.analysis.vpc_id
  subnet_ids        = module.analysis.private_subnet_ids
  zookeeper_connect = module.analysis.zookeeper_connect
  reader_cidrs      = concat([module.analysis.vpc_cidr], var.operator_cidrs)
  db_multi_az       = true
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
  providers         = { aws = aws.analysis }
  name              = "samsa-prod-analysis"
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
  providers   = { aws = aws.analysis }
  kms_key_arn = module.analysis.kms_key_arn
  tags        = var.tags
}

locals {
  image_registry = var.image_registry != "" ? var.image_registry : module.registry.registry
}
