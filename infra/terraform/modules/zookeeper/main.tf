# A ZooKeeper ensemble in one datacenter: one instance per member in private
# subnets with fixed private addresses (the members find each other by them),
# encrypted volumes, reachable only on its client port from inside the VPC.

locals {
  tags = merge(var.tags, { "samsa:module" = "zookeeper" })
  # member i: the 10th + i address of its subnet (fixed, so zoo.cfg can name it)
  subnet_of  = [for i in range(var.size) : var.subnet_ids[i % length(var.subnet_ids)]]
  member_ips = [for i in range(var.size) : cidrhost(data.aws_subnet.member[i].cidr_block, 10 + floor(i / length(var.subnet_ids)))]
  # the image's ZOO_SERVERS: "1=ip:2888:3888,2=..."
  servers = join(",", [for i, ip in local.member_ips : "${i + 1}=${ip}:2888:3888"])
}

data "aws_subnet" "member" {
  count = var.size
  id    = local.subnet_of[count.index]
}

module "service" {
  source         = "../service-instances"
  name           = "${var.name}-zookeeper"
  description    = "ZooKeeper: clients inside the VPC, members among themselves"
  instances      = var.size
  vpc_id         = var.vpc_id
  subnet_ids     = var.subnet_ids
  private_ips    = local.member_ips
  instance_type  = var.instance_type
  ami_id         = var.ami_id
  kms_key_arn    = var.kms_key_arn
  data_volume_gb = var.data_volume_gb
  user_data = [for i in range(var.size) : templatefile("${path.module}/user_data.sh.tftpl", {
    boot_common      = file("${path.module}/../../boot/common.sh")
    ssm_agent_base   = local.ssm_agent_base
    metadata_url     = "http://169.254.169.254"
    member_id        = i + 1
    address          = local.member_ips[i]
    servers          = local.servers
    image            = var.image
    tools_image      = var.tools_image
    secrets          = var.secrets_name
    secrets_endpoint = ""
    data_device      = "/dev/xvdb"
    state_dir        = "/var/lib/samsa"
    config_dir       = "/etc/samsa"
  })]
  tags = local.tags

  # the secrets it reads at boot (module secrets)
  secret_arns          = var.secret_arns
  secrets_kms_key_arns = var.secrets_kms_key_arns
}

resource "aws_vpc_security_group_ingress_rule" "client" {
  for_each          = toset(var.client_cidrs)
  security_group_id = module.service.security_group_id
  description       = "ZooKeeper clients (brokers, mirror, loader, audit) inside the VPC"
  ip_protocol       = "tcp"
  from_port         = 2181
  to_port           = 2181
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "peers" {
  for_each                     = { quorum = 2888, election = 3888 }
  security_group_id            = module.service.security_group_id
  description                  = "ZooKeeper ${each.key} traffic between members"
  ip_protocol                  = "tcp"
  from_port                    = each.value
  to_port                      = each.value
  referenced_security_group_id = module.service.security_group_id
}

# Amazon's SSM agent, from the region's bucket (boot/common.sh install_ssm_agent)
data "aws_region" "ssm" {}

locals {
  ssm_agent_base = "https://amazon-ssm-${data.aws_region.ssm.name}.s3.${data.aws_region.ssm.name}.amazonaws.com/latest"
}
