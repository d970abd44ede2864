# terraform test, offline (a mocked provider with the AWS provider's schema
# from a local plugin directory): one datacenter's parts wired together.
# Plans only: the brokers' and ZooKeeper's data volumes refuse a destroy.
# The mock's values stand in for what AWS computes at plan too
# (override_during = plan), and the ZooKeeper members' subnets are given
# their ranges, so that what the first apply would compute is known here:
# the zookeeper_connect output is the ensemble's connect string with the
# cluster's chroot; the brokers' data volumes are sized from the write rate,
# retention and replication given to the datacenter; the KMS key (rotated,
# administered by the account) encrypts the volumes and, by default, is the
# key the services decrypt their secrets with; the load balancer is there
# for a producer datacenter and not with load_balancer = false. What the
# assertions cannot reach: the child modules' own resources (which groups
# the brokers admit: modules/load-balancer, broker-cluster and zookeeper
# have suites of their own).

mock_provider "aws" {
  override_during = plan

  mock_resource "aws_kms_key" {
    defaults = {
      arn = "arn:aws:kms:us-east-1:111122223333:key/00000000-0000-0000-0000-000000000000"
    }
  }
  mock_resource "aws_cloudwatch_log_group" {
    defaults = {
      arn = "arn:aws:logs:us-east-1:111122223333:log-group:/samsa/samsa-test-use1/vpc-flow"
    }
  }
  mock_resource "aws_iam_role" {
    defaults = {
      arn = "arn:aws:iam::111122223333:role/samsa-test-use1"
    }
  }
  mock_resource "aws_lb" {
    defaults = {
      arn      = "arn:aws:elasticloadbalancing:us-east-1:111122223333:loadbalancer/net/samsa-test-use1-nlb/0123456789abcdef"
      dns_name = "samsa-test-use1-nlb-0123456789abcdef.elb.us-east-1.amazonaws.com"
    }
  }
  mock_resource "aws_lb_target_group" {
    defaults = {
      arn = "arn:aws:elasticloadbalancing:us-east-1:111122223333:targetgroup/samsa-test-use1-brokers/0123456789abcdef"
    }
  }
  mock_data "aws_region" {
    defaults = {
      name = "us-east-1"
    }
  }
  mock_data "aws_caller_identity" {
    defaults = {
      account_id = "111122223333"
    }
  }
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
  mock_data "aws_subnet" {
    defaults = {
      availability_zone = "us-east-1a"
      cidr_block        = "10.10.0.0/20"
    }
  }
  mock_data "aws_vpc" {
    defaults = {
      cidr_block = "10.10.0.0/16"
    }
  }
}

# the network's private subnets (their ids known at plan, as the members'
# addresses are read from them) and their ranges, the /20s it cuts per zone
override_resource {
  target          = module.network.aws_subnet.private[0]
  override_during = plan
  values = {
    id = "subnet-a"
  }
}

override_resource {
  target          = module.network.aws_subnet.private[1]
  override_during = plan
  values = {
    id = "subnet-b"
  }
}

override_resource {
  target          = module.network.aws_subnet.private[2]
  override_during = plan
  values = {
    id = "subnet-c"
  }
}

override_data {
  target          = module.zookeeper.data.aws_subnet.member[1]
  override_during = plan
  values = {
    availability_zone = "us-east-1b"
    cidr_block        = "10.10.16.0/20"
  }
}

override_data {
  target          = module.zookeeper.data.aws_subnet.member[2]
  override_during = plan
  values = {
    availability_zone = "us-east-1c"
    cidr_block        = "10.10.32.0/20"
  }
}

variables {
  name                = "samsa-test-use1"
  cluster             = "dc-us-east"
  cidr                = "10.10.0.0/16"
  availability_zones  = ["us-east-1a", "us-east-1b", "us-east-1c"]
  brokers             = 3
  replication_factor  = 3
  write_mb_per_s      = 2
  retention_hours     = 168
  remote_client_cidrs = { mirror = "10.30.0.0/16" }
  broker_config_toml  = "# Samsa broker settings\nreplication_factor = 3\n"
  zookeeper_image     = "111122223333.dkr.ecr.us-east-2.amazonaws.com/samsa/zookeeper:0.1.0-aaaaaaaaaaaa"
  samsa_image         = "111122223333.dkr.ecr.us-east-2.amazonaws.com/samsa/samsa:0.1.0-aaaaaaaaaaaa"
  secrets_name        = "samsa-test"
  ami_id              = "ami-0123456789abcdef0"
}

run "a_producer_datacenter" {
  command = plan

  assert {
    condition     = output.zookeeper_connect == "10.10.0.10:2181,10.10.16.10:2181,10.10.32.10:2181/dc-us-east"
    error_message = "zookeeper_connect is the ensemble's members with the cluster's chroot (/<cluster>)"
  }
  assert {
    condition     = output.zookeeper_connect == "${module.zookeeper.connect_string}/${var.cluster}"
    error_message = "the brokers' ZooKeeper is this datacenter's ensemble"
  }
  assert {
    condition     = length(module.load_balancer) == 1 && output.load_balancer_address == "samsa-test-use1-nlb-0123456789abcdef.elb.us-east-1.amazonaws.com:9092"
    error_message = "a producer datacenter's producers connect to its load balancer"
  }
  assert {
    # retained 2 MB/s * 3600 * 168 h * 3 copies / 3 brokers / 1000 = 1209.6 GB,
    # slack 8 partitions * 3 copies * 1 GB = 24, headroom 30 %: ceil(1603.68)
    condition     = output.data_volume_gb == 1604
    error_message = "each broker's volume is sized from the datacenter's write rate, retention and replication"
  }
  assert {
    condition     = length(module.brokers.data_volume_ids) == 3 && length(module.zookeeper.data_volume_ids) == 3
    error_message = "a data volume per broker and per ZooKeeper member"
  }
  assert {
    condition     = aws_kms_key.volumes.enable_key_rotation && output.kms_key_arn == aws_kms_key.volumes.arn
    error_message = "the datacenter's key is rotated, and is the kms_key_arn output"
  }
  assert {
    condition = (one(data.aws_iam_policy_document.volumes_key.statement).actions == toset(["kms:*"])
    && one(one(data.aws_iam_policy_document.volumes_key.statement).principals).identifiers == toset(["arn:aws:iam::111122223333:root"]))
    error_message = "the account administers the key (through IAM), nobody else by the key policy"
  }
  assert {
    condition     = local.secrets_kms_key_arns == [aws_kms_key.volumes.arn]
    error_message = "no secrets_kms_key_arn: the services decrypt their secrets with the datacenter's own key"
  }
  assert {
    condition     = output.vpc_cidr == "10.10.0.0/16" && length(output.private_subnet_ids) == 3 && length(output.private_route_table_ids) == 3
    error_message = "the network's range, a private subnet and route table per zone"
  }
}

run "the_analysis_datacenter_has_no_load_balancer" {
  command = plan

  variables {
    name                = "samsa-test-analysis"
    cluster             = "analysis"
    load_balancer       = false
    remote_client_cidrs = {}
    local_client_security_group_ids = {
      mirror = "sg-0123456789abcdef0"
    }
    secrets_kms_key_arn = "arn:aws:kms:us-east-1:111122223333:key/11111111-1111-1111-1111-111111111111"
  }

  assert {
    condition     = length(module.load_balancer) == 0 && output.load_balancer_address == null
    error_message = "load_balancer = false: no load balancer, no address"
  }
  assert {
    condition     = endswith(output.zookeeper_connect, ":2181/analysis")
    error_message = "the chroot is the cluster's"
  }
  assert {
    condition     = local.secrets_kms_key_arns == ["arn:aws:kms:us-east-1:111122223333:key/11111111-1111-1111-1111-111111111111"]
    error_message = "secrets_kms_key_arn given: the services decrypt their secrets with it"
  }
}

run "the_longest_name_allowed_plans" {
  command = plan
  variables {
    # 24 characters: the load balancer's target group, NAME-brokers, is AWS's 32
    name = "samsa-test-a-name-of-24c"
  }
}

run "a_name_over_24_characters_is_refused" {
  # the defect: 27 were allowed, and the target group's name was then refused at plan
  command = plan
  variables {
    name = "samsa-test-a-name-of-25ch"
  }
  expect_failures = [var.name]
}
