# One Samsa cluster in one datacenter: `brokers` instances in private
# subnets, each with its own encrypted data volume sized from the retention
# and the write rate, reachable on the broker port only from the load
# balancer, the mirror and the loader.

locals {
  tags      = merge(var.tags, { "samsa:module" = "broker-cluster", "samsa:cluster" = var.cluster })
  subnet_of = [for i in range(var.brokers) : var.subnet_ids[i % length(var.subnet_ids)]]

  # Data volume per broker (GB):
  #   retained = write_mb_per_s * 3600 * retention_hours / brokers / 1000
  #   slack    = partitions_per_broker * segment_gb   (a segment is deleted whole, so each
  #              partition may hold up to one segment more than the retention asks)
  #   volume   = ceil((retained + slack) * (1 + headroom))
  retained_gb         = var.write_mb_per_s * 3600 * var.retention_hours / var.brokers / 1000
  slack_gb            = var.partitions_per_broker * var.segment_gb
  computed_volume_gb  = ceil((local.retained_gb + local.slack_gb) * (1 + var.headroom))
  data_volume_gb      = coalesce(var.data_volume_gb, max(local.computed_volume_gb, 20))
  zookeeper_with_root = "${var.zookeeper_connect}/${var.cluster}"
}

resource "aws_security_group" "broker" {
  name        = "${var.name}-${var.cluster}-brokers"
  description = "Samsa brokers of ${var.cluster}: the load balancer, the mirror and the loader only"
  vpc_id      = var.vpc_id
  tags        = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "clients" {
  for_each                     = var.client_security_group_ids
  security_group_id            = aws_security_group.broker.id
  description                  = "Samsa protocol from ${each.key}"
  ip_protocol                  = "tcp"
  from_port                    = 9092
  to_port                      = 9092
  referenced_security_group_id = each.value
}

resource "aws_vpc_security_group_ingress_rule" "remote_clients" {
  for_each          = var.client_cidrs
  security_group_id = aws_security_group.broker.id
  description       = "Samsa protocol from ${each.key} (another region)"
  ip_protocol       = "tcp"
  from_port         = 9092
  to_port           = 9092
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "metrics" {
  for_each          = toset(var.metrics_cidrs)
  security_group_id = aws_security_group.broker.id
  description       = "Prometheus scrapes /metrics"
  ip_protocol       = "tcp"
  from_port         = 9093
  to_port           = 9093
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_egress_rule" "all" {
  security_group_id = aws_security_group.broker.id
  description       = "ZooKeeper, packages through the NAT gateway"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

data "aws_iam_policy_document" "wheel" {
  statement {
    sid       = "ReadTheSamsaWheel"
    actions   = ["s3:GetObject"]
    resources = [startswith(var.samsa_wheel_url, "s3://") ? "arn:aws:s3:::${trimprefix(var.samsa_wheel_url, "s3://")}" : "arn:aws:s3:::none/none"]
  }
}

module "role" {
  source            = "../service-role"
  name              = "${var.name}-${var.cluster}-broker"
  extra_policy_json = data.aws_iam_policy_document.wheel.json
  tags              = local.tags
}

resource "aws_instance" "broker" {
  count                       = var.brokers
  ami                         = var.ami_id
  instance_type               = var.instance_type
  subnet_id                   = local.subnet_of[count.index]
  vpc_security_group_ids      = [aws_security_group.broker.id]
  iam_instance_profile        = module.role.instance_profile_name
  associate_public_ip_address = false
  ebs_optimized               = true
  monitoring                  = true

  metadata_options {
    http_tokens   = "required"
    http_endpoint = "enabled"
  }

  root_block_device {
    encrypted   = true
    kms_key_id  = var.kms_key_arn
    volume_type = "gp3"
    volume_size = 30
  }

  user_data = templatefile("${path.module}/user_data.sh.tftpl", {
    broker_id       = count.index
    zookeeper       = local.zookeeper_with_root
    broker_config   = var.broker_config_toml
    samsa_wheel_url = var.samsa_wheel_url
  })

  tags = merge(local.tags, { Name = "${var.name}-${var.cluster}-broker-${count.index}", "samsa:broker-id" = tostring(count.index) })
}

# the data volume outlives the instance: replacing a broker keeps its log
resource "aws_ebs_volume" "data" {
  count             = var.brokers
  availability_zone = aws_instance.broker[count.index].availability_zone
  size              = local.data_volume_gb
  type              = "gp3"
  encrypted         = true
  kms_key_id        = var.kms_key_arn
  tags              = merge(local.tags, { Name = "${var.name}-${var.cluster}-broker-${count.index}-data" })
}

resource "aws_volume_attachment" "data" {
  count       = var.brokers
  device_name = "/dev/xvdb"
  volume_id   = aws_ebs_volume.data[count.index].id
  instance_id = aws_instance.broker[count.index].id
}
