# The instances of one service, as every Samsa service runs them: private
# subnets, no public address, IMDSv2 only, encrypted volumes, the service's
# own IAM role (module service-role) and security group (egress only here:
# the caller adds who may connect).

resource "aws_security_group" "this" {
  name        = var.name
  description = var.description
  vpc_id      = var.vpc_id
  tags        = var.tags
}

resource "aws_vpc_security_group_egress_rule" "all" {
  security_group_id = aws_security_group.this.id
  description       = "Its clusters, databases and AWS APIs; packages through the NAT gateway"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

module "role" {
  source            = "../service-role"
  name              = var.name
  extra_policy_json = var.policy_json
  tags              = var.tags

  # the secrets it reads at boot (module secrets)
  secret_arns          = var.secret_arns
  secrets_kms_key_arns = var.secrets_kms_key_arns
}

resource "aws_instance" "this" {
  count                       = var.instances
  ami                         = var.ami_id
  instance_type               = var.instance_type
  subnet_id                   = var.subnet_ids[count.index % length(var.subnet_ids)]
  private_ip                  = length(var.private_ips) > 0 ? var.private_ips[count.index] : null
  vpc_security_group_ids      = [aws_security_group.this.id]
  iam_instance_profile        = module.role.instance_profile_name
  associate_public_ip_address = false
  ebs_optimized               = true
  monitoring                  = true
  user_data                   = var.user_data[length(var.user_data) == 1 ? 0 : count.index]
  user_data_replace_on_change = true

  metadata_options {
    http_tokens   = "required" # IMDSv2 only
    http_endpoint = "enabled"
  }

  root_block_device {
    encrypted   = true
    kms_key_id  = var.kms_key_arn
    volume_type = "gp3"
    volume_size = var.root_volume_gb
  }

  dynamic "ebs_block_device" {
    for_each = var.data_volume_gb == null ? [] : [var.data_volume_gb]
    content {
      device_name = "/dev/xvdb"
      encrypted   = true
      kms_key_id  = var.kms_key_arn
      volume_type = "gp3"
      volume_size = ebs_block_device.value
    }
  }

  tags = merge(var.tags, { Name = "${var.name}-${count.index}" })
}
