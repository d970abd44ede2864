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
  source   = "../service-role"
  name     = var.name
  policies = var.policies
  tags     = var.tags

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
  # gzip-compressed (cloud-init unpacks it): EC2 takes 16 KB of user data
  # at most, before base64, and a secured broker's script with its
  # rendered settings and ACLs is over that uncompressed
  user_data_base64            = base64gzip(var.user_data[length(var.user_data) == 1 ? 0 : count.index])
  user_data_replace_on_change = false

  metadata_options {
    http_tokens   = "required" # IMDSv2 only
    http_endpoint = "enabled"
  }

  root_block_device {
    encrypted   = true
    kms_key_id  = var.kms_key_arn
    volume_type = "gp3"
    volume_size = var.root_volume_gb
    # the providers' default_tags do not reach a root volume
    tags = merge(var.tags, { Name = "${var.name}-${count.index}-root" })
  }

  tags = merge(var.tags, { Name = "${var.name}-${count.index}" })

  lifecycle {
    # a new image or setting changes the boot script: it is not applied by
    # replacing every instance at once (nor by stopping each to rewrite its
    # user data), but rolled, one instance at a time, by the operator
    # (terraform apply -replace=...; infra/terraform/README.md, "Upgrades")
    ignore_changes = [user_data, user_data_base64, ami]
  }
}

# each instance's subnet: its data volume is made in that subnet's zone (not
# in the instance's, which a replacement instance would change)
data "aws_subnet" "instance" {
  count = var.data_volume_gb == null ? 0 : var.instances
  id    = var.subnet_ids[count.index % length(var.subnet_ids)]
}

# the data volumes: resources of their own, so that they outlive their
# instances (a replaced instance gets the same volume back), and that no
# plan may destroy (prevent_destroy: a change that would replace one is an
# error, not a lost log)
resource "aws_ebs_volume" "data" {
  count             = var.data_volume_gb == null ? 0 : var.instances
  availability_zone = data.aws_subnet.instance[count.index].availability_zone
  size              = var.data_volume_gb
  type              = "gp3"
  encrypted         = true
  kms_key_id        = var.kms_key_arn
  tags              = merge(var.tags, { Name = "${var.name}-${count.index}-data" })

  lifecycle {
    prevent_destroy = true
  }
}

resource "aws_volume_attachment" "data" {
  count       = var.data_volume_gb == null ? 0 : var.instances
  device_name = "/dev/xvdb"
  volume_id   = aws_ebs_volume.data[count.index].id
  instance_id = aws_instance.this[count.index].id
}
