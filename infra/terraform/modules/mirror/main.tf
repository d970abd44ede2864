# The mirror: `processes` instances in the analysis datacenter, one consumer
# group pulling from every producer datacenter (over VPC peering) into the
# analysis cluster, with the settings rendered from the topology model.

locals {
  tags   = merge(var.tags, { "samsa:module" = "mirror" })
  config = templatestring(var.mirror_config_template, { zookeeper = var.zookeeper_connect })
}

module "service" {
  source        = "../service-instances"
  name          = "${var.name}-mirror"
  description   = "Samsa mirror: pulls from the datacenters, writes to analysis; /metrics to monitoring"
  instances     = var.processes
  vpc_id        = var.vpc_id
  subnet_ids    = var.subnet_ids
  instance_type = var.instance_type
  ami_id        = var.ami_id
  kms_key_arn   = var.kms_key_arn
  user_data = [for i in range(var.processes) : templatefile("${path.module}/user_data.sh.tftpl", {
    boot_common      = file("${path.module}/../../boot/common.sh")
    ssm_agent_base   = local.ssm_agent_base
    metadata_url     = "http://169.254.169.254"
    process          = i
    mirror_config    = local.config
    image            = var.image
    secrets          = var.secrets_name
    secrets_endpoint = ""
    config_dir       = "/etc/samsa"
  })]
  tags = local.tags

  # the secrets it reads at boot (module secrets)
  secret_arns          = var.secret_arns
  secrets_kms_key_arns = var.secrets_kms_key_arns
}

resource "aws_vpc_security_group_ingress_rule" "metrics" {
  for_each          = toset(var.metrics_cidrs)
  security_group_id = module.service.security_group_id
  description       = "Prometheus scrapes /metrics"
  ip_protocol       = "tcp"
  from_port         = 9095
  to_port           = 9095
  cidr_ipv4         = each.value
}

# Amazon's SSM agent, from the region's bucket (boot/common.sh install_ssm_agent)
data "aws_region" "ssm" {}

locals {
  ssm_agent_base = "https://amazon-ssm-${data.aws_region.ssm.name}.s3.${data.aws_region.ssm.name}.amazonaws.com/latest"
}
