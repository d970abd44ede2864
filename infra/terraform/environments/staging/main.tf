# Staging: one producer datacenter and the analysis datacenter in one region,
# small instances, the same modules as production.

provider "aws" {
  region = var.datacenters["dc-staging"]
}

data "aws_availability_zones" "this" {
  state = "available"
}

locals {
  analysis_cidr = "10.130.0.0/16"
}

module "dc_staging" {
  source               = "../../modules/datacenter"
  name                 = "samsa-stg-dc"
  cluster              = "dc-staging"
  cidr                 = "10.110.0.0/16"
  availability_zones   = slice(data.aws_availability_zones.this.names, 0, 2)
  zookeeper_size       = 3
  brokers              = var.brokers_per_dc
  remote_client_cidrs  = { mirror = local.analysis_cidr }
  broker_config_toml   = file("${path.module}/rendered/broker-dc-staging.toml")
  samsa_wheel_url      = var.samsa_wheel_url
  write_mb_per_s       = var.write_mb_per_s
  retention_hours      = var.retention_hours
  broker_instance_type = "t3.large"
  ami_id               = var.ami_ids[var.datacenters["dc-staging"]]
  tags                 = var.tags
}

module "analysis" {
  source               = "../../modules/datacenter"
  name                 = "samsa-stg-analysis"
  cluster              = "analysis"
  cidr                 = local.analysis_cidr
  availability_zones   = slice(data.aws_availability_zones.this.names, 0, 2)
  zookeeper_size       = 3
  brokers              = var.analysis_brokers
  load_balancer        = false
  broker_config_toml   = file("${path.module}/rendered/broker-analysis.toml")
  samsa_wheel_url      = var.samsa_wheel_url
  write_mb_per_s       = var.write_mb_per_s
  retention_hours      = var.retention_hours
  broker_instance_type = "t3.large"
  ami_id               = var.ami_ids[var.analysis_region]
  tags                 = var.tags
}

module "peering" {
  source    = "../../modules/peering"
  providers = { aws.requester = aws, aws.accepter = aws }
  name      = "samsa-stg-analysis-dc"
  requester = { vpc_id = module.analysis.vpc_id, cidr = module.analysis.vpc_cidr, route_table_ids = module.analysis.private_route_table_ids }
  accepter  = { vpc_id = module.dc_staging.vpc_id, cidr = module.dc_staging.vpc_cidr, route_table_ids = module.dc_staging.private_route_table_ids, region = var.datacenters["dc-staging"] }
  tags      = var.tags
}
