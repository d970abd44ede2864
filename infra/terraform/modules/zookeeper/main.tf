# A ZooKeeper ensemble in one datacenter: one instance per member in private
# subnets with fixed private addresses (the members find each other by them),
# encrypted volumes, reachable only on its client port from inside the VPC.

locals {
  tags = merge(var.tags, { "samsa:module" = "zookeeper" })
  # member i: the 10th + i address of its subnet (fixed, so zoo.cfg can name it)
  subnet_of  = [for i in range(var.size) : var.subnet_ids[i % length(var.subnet_ids)]]
  member_ips = [for i in range(var.size) : cidrhost(data.aws_subnet.member[i].cidr_block, 10 + floor(i / length(var.subnet_ids)))]
  servers    = join("\n", [for i, ip in local.member_ips : "server.${i + 1}=${ip}:2888:3888"])
}

data "aws_subnet" "member" {
  count = var.size
  id    = local.subnet_of[count.index]
}

resource "aws_security_group" "zookeeper" {
  name        = "${var.name}-zookeeper"
  description = "ZooKeeper: clients inside the VPC, members among themselves"
  vpc_id      = var.vpc_id
  tags        = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "client" {
  for_each          = toset(var.client_cidrs)
  security_group_id = aws_security_group.zookeeper.id
  description       = "ZooKeeper clients (brokers, mirror, loader, audit) inside the VPC"
  ip_protocol       = "tcp"
  from_port         = 2181
  to_port           = 2181
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "peers" {
  for_each                     = { quorum = 2888, election = 3888 }
  security_group_id            = aws_security_group.zookeeper.id
  description                  = "ZooKeeper ${each.key} traffic between members"
  ip_protocol                  = "tcp"
  from_port                    = each.value
  to_port                      = each.value
  referenced_security_group_id = aws_security_group.zookeeper.id
}

resource "aws_vpc_security_group_egress_rule" "all" {
  security_group_id = aws_security_group.zookeeper.id
  description       = "Package installs (through the NAT gateway) and peers"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

module "role" {
  source = "../service-role"
  name   = "${var.name}-zookeeper"
  tags   = local.tags
}

resource "aws_instance" "member" {
  count                       = var.size
  ami                         = var.ami_id
  instance_type               = var.instance_type
  subnet_id                   = local.subnet_of[count.index]
  private_ip                  = local.member_ips[count.index]
  vpc_security_group_ids      = [aws_security_group.zookeeper.id]
  iam_instance_profile        = module.role.instance_profile_name
  associate_public_ip_address = false
  ebs_optimized               = true
  monitoring                  = true

  metadata_options {
    http_tokens   = "required" # IMDSv2 only
    http_endpoint = "enabled"
  }

  root_block_device {
    encrypted   = true
    kms_key_id  = var.kms_key_arn
    volume_type = "gp3"
    volume_size = 20
  }

  ebs_block_device {
    device_name = "/dev/xvdb"
    encrypted   = true
    kms_key_id  = var.kms_key_arn
    volume_type = "gp3"
    volume_size = var.data_volume_gb
  }

  user_data = templatefile("${path.module}/user_data.sh.tftpl", {
    member_id = count.index + 1
    servers   = local.servers
  })
  user_data_replace_on_change = true

  tags = merge(local.tags, { Name = "${var.name}-zookeeper-${count.index + 1}" })
}
