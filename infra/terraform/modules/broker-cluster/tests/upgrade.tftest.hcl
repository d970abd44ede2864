# terraform test, offline (tests/infra/test_terraform_plans.py runs it with
# the AWS provider's schema from a local plugin directory): a mocked provider
# "applies" a cluster of three brokers, then an upgrade (a new image tag and
# a changed setting) is planned against that state. What it shows: a data
# volume per broker, a resource of its own beside its instance, which the
# upgrade's plan keeps (the same ids), and which nothing may destroy: at the
# end terraform test destroys what it applied, and the volumes'
# prevent_destroy refuses (the pytest expects that refusal, once per volume).
# What it cannot show: whether AWS's provider would replace an instance (a
# mock computes no replacement); the instances ignore changes of their boot
# script (ignore_changes) and are rolled by the operator instead.

mock_provider "aws" {
  mock_data "aws_subnet" {
    defaults = {
      availability_zone = "us-east-1b"
      cidr_block        = "10.10.1.0/24"
    }
  }
  mock_data "aws_caller_identity" {
    defaults = {
      account_id = "111122223333"
    }
  }
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\": \"2012-10-17\", \"Statement\": []}"
    }
  }
}

variables {
  name                      = "samsa-test"
  cluster                   = "dc-us-east"
  brokers                   = 3
  vpc_id                    = "vpc-0123456789abcdef0"
  subnet_ids                = ["subnet-a", "subnet-b", "subnet-c"]
  zookeeper_connect         = "10.10.1.10:2181,10.10.2.10:2181,10.10.3.10:2181"
  client_security_group_ids = { load_balancer = "sg-0123456789abcdef0" }
  broker_config_toml        = "# Samsa broker settings\nlog.flush_ms = 100\n"
  image                     = "123456789012.dkr.ecr.us-east-2.amazonaws.com/samsa/samsa:0.1.0-aaaaaaaaaaaa"
  secrets_name              = "samsa-test"
  write_mb_per_s            = 2
  ami_id                    = "ami-0123456789abcdef0"
  kms_key_arn               = "arn:aws:kms:us-east-1:111122223333:key/volumes"
}

run "first_apply" {
  command = apply

  assert {
    condition     = length(output.data_volume_ids) == 3 && length(output.instance_ids) == 3
    error_message = "a data volume per broker"
  }
  assert {
    condition     = alltrue([for v in module.service.data_volume_ids : v != ""])
    error_message = "every volume made"
  }
  # the defect: no rule admitted the brokers to one another, so no follower
  # could fetch from its leader (replication factor 3 never in sync)
  assert {
    condition = (aws_vpc_security_group_ingress_rule.replication.referenced_security_group_id == module.service.security_group_id
      && aws_vpc_security_group_ingress_rule.replication.security_group_id == module.service.security_group_id
    && aws_vpc_security_group_ingress_rule.replication.from_port == 9092 && aws_vpc_security_group_ingress_rule.replication.to_port == 9092)
    error_message = "the brokers admit one another on 9092 (replication)"
  }
}

run "an_upgrade_keeps_every_data_volume" {
  command = plan

  variables {
    image              = "123456789012.dkr.ecr.us-east-2.amazonaws.com/samsa/samsa:0.1.1-bbbbbbbbbbbb"
    broker_config_toml = "# Samsa broker settings\nlog.flush_ms = 200\n"
  }

  assert {
    condition     = output.data_volume_ids == run.first_apply.data_volume_ids
    error_message = "an upgrade must keep every data volume"
  }
}
