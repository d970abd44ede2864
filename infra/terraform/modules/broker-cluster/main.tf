# One Samsa cluster in one datacenter: `brokers` instances in private
# subnets, each with its own encrypted data volume sized from the retention
# and the write rate, reachable on the broker port only from the load
# balancer, the mirror and the loader.

locals {
  tags = merge(var.tags, { "samsa:module" = "broker-cluster", "samsa:cluster" = var.cluster })

  # Data volume per broker (GB), with copies = max(replication_factor, 1):
  #   retained = write_mb_per_s * 3600 * retention_hours * copies / brokers / 1000
  #   slack    = partitions_per_broker * copies * segment_gb   (a segment is deleted whole,
  #              so each replica may hold up to one segment more than the retention asks)
  #   volume   = ceil((retained + slack) * (1 + headroom))
  copies              = max(var.replication_factor, 1)
  retained_gb         = var.write_mb_per_s * 3600 * var.retention_hours * local.copies / var.brokers / 1000
  slack_gb            = var.partitions_per_broker * local.copies * var.segment_gb
  computed_volume_gb  = ceil((local.retained_gb + local.slack_gb) * (1 + var.headroom))
  data_volume_gb      = coalesce(var.data_volume_gb, max(local.computed_volume_gb, 20))
  zookeeper_with_root = "${var.zookeeper_connect}/${var.cluster}"
}

module "service" {
  source         = "../service-instances"
  name           = "${var.name}-${var.cluster}-broker"
  description    = "Samsa brokers of ${var.cluster}: the load balancer, the mirror and the loader only"
  instances      = var.brokers
  vpc_id         = var.vpc_id
  subnet_ids     = var.subnet_ids
  instance_type  = var.instance_type
  ami_id         = var.ami_id
  kms_key_arn    = var.kms_key_arn
  root_volume_gb = 30
  data_volume_gb = local.data_volume_gb
  user_data = [for i in range(var.brokers) : templatefile("${path.module}/user_data.sh.tftpl", {
    boot_common       = file("${path.module}/../../boot/common.sh")
    ssm_agent_base    = local.ssm_agent_base
    metadata_url      = "http://169.254.169.254"
    broker_id         = i
    zookeeper         = local.zookeeper_with_root
    broker_config     = var.broker_config_toml
    acls              = var.acls_toml
    image             = var.image
    secrets           = var.secrets_name
    secrets_endpoint  = ""
    certificate_names = var.certificate_names
    data_device       = "/dev/xvdb"
    state_dir         = "/var/lib/samsa"
    config_dir        = "/etc/samsa"
  })]
  tags = local.tags

  # the secrets it reads at boot (module secrets)
  secret_arns          = var.secret_arns
  secrets_kms_key_arns = var.secrets_kms_key_arns
}

resource "aws_vpc_security_group_ingress_rule" "clients" {
  for_each                     = var.client_security_group_ids
  security_group_id            = module.service.security_group_id
  description                  = "Samsa protocol from ${each.key}"
  ip_protocol                  = "tcp"
  from_port                    = 9092
  to_port                      = 9092
  referenced_security_group_id = each.value
}

# the cluster's own brokers: a follower fetches from its partitions' leaders
# on the same port (replication; over TLS as the broker's user when secured)
resource "aws_vpc_security_group_ingress_rule" "replication" {
  security_group_id            = module.service.security_group_id
  description                  = "Replication between the cluster's brokers"
  ip_protocol                  = "tcp"
  from_port                    = 9092
  to_port                      = 9092
  referenced_security_group_id = module.service.security_group_id
}

resource "aws_vpc_security_group_ingress_rule" "remote_clients" {
  for_each          = var.client_cidrs
  security_group_id = module.service.security_group_id
  description       = "Samsa protocol from ${each.key} (another region)"
  ip_protocol       = "tcp"
  from_port         = 9092
  to_port           = 9092
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "metrics" {
  for_each          = toset(var.metrics_cidrs)
  security_group_id = module.service.security_group_id
  description       = "Prometheus scrapes /metrics"
  ip_protocol       = "tcp"
  from_port         = 9093
  to_port           = 9093
  cidr_ipv4         = each.value
}

# the data volume outlives the instance: replacing a broker keeps its log
# its data volumes were resources of this module: now service-instances'
# (the same volumes, moved, not made anew)
moved {
  from = aws_ebs_volume.data
  to   = module.service.aws_ebs_volume.data
}

moved {
  from = aws_volume_attachment.data
  to   = module.service.aws_volume_attachment.data
}

# Amazon's SSM agent, from the region's bucket (boot/common.sh install_ssm_agent)
data "aws_region" "ssm" {}

locals {
  ssm_agent_base = "https://amazon-ssm-${data.aws_region.ssm.name}.s3.${data.aws_region.ssm.name}.amazonaws.com/latest"
}
