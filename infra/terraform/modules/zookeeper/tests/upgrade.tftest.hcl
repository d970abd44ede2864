# terraform test, offline (tests/infra/test_terraform_plans.py runs it with
# the AWS provider's schema from a local plugin directory): a mocked provider
# "applies" an ensemble of three members, then an upgrade (a new image tag and
# another member address) is planned against that state. What it shows: a data
# volume per member, a resource of its own beside its instance, which the
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
  name         = "samsa-test"
  size         = 3
  vpc_id       = "vpc-0123456789abcdef0"
  subnet_ids   = ["subnet-a", "subnet-b", "subnet-c"]
  client_cidrs = ["10.10.0.0/16"]
  ami_id       = "ami-0123456789abcdef0"
  image        = "123456789012.dkr.ecr.us-east-2.amazonaws.com/samsa/zookeeper:0.1.0-aaaaaaaaaaaa"
  tools_image  = "123456789012.dkr.ecr.us-east-2.amazonaws.com/samsa/samsa:0.1.0-aaaaaaaaaaaa"
  secrets_name = "samsa-test"
  kms_key_arn  = "arn:aws:kms:us-east-1:111122223333:key/volumes"
}

run "first_apply" {
  command = apply

  assert {
    condition     = length(output.data_volume_ids) == 3 && length(output.instance_ids) == 3
    error_message = "a data volume per member"
  }
}

run "an_upgrade_keeps_every_data_volume" {
  command = plan

  variables {
    image       = "123456789012.dkr.ecr.us-east-2.amazonaws.com/samsa/zookeeper:0.1.1-bbbbbbbbbbbb"
    tools_image = "123456789012.dkr.ecr.us-east-2.amazonaws.com/samsa/samsa:0.1.1-bbbbbbbbbbbb"
  }

  assert {
    condition     = output.data_volume_ids == run.first_apply.data_volume_ids
    error_message = "an upgrade must keep every member's data volume"
  }
}

run "the_client_port_admits_exactly_the_ranges_given" {
  command = plan

  variables {
    client_cidrs = ["10.10.0.0/16", "10.30.0.0/16"]
  }

  assert {
    condition     = toset([for r in aws_vpc_security_group_ingress_rule.client : r.cidr_ipv4]) == toset(["10.10.0.0/16", "10.30.0.0/16"])
    error_message = "the client port (2181) admits the ranges given, nothing else"
  }
  assert {
    condition     = alltrue([for r in aws_vpc_security_group_ingress_rule.client : r.from_port == 2181 && r.to_port == 2181])
    error_message = "only the client port"
  }
}

# the whole internet in any spelling, a range wider than /8, and what is not
# an IPv4 range are refused (parsed, not matched against "0.0.0.0/0")
run "the_whole_internet_spelled_otherwise_is_refused" {
  command = plan
  variables {
    client_cidrs = ["10.10.0.0/16", "0.0.0.0/1"]
  }
  expect_failures = [var.client_cidrs]
}

run "a_range_wider_than_8_is_refused" {
  command = plan
  variables {
    client_cidrs = ["10.0.0.0/7"]
  }
  expect_failures = [var.client_cidrs]
}

run "ipv6_everything_is_refused" {
  command = plan
  variables {
    client_cidrs = ["::/0"]
  }
  expect_failures = [var.client_cidrs]
}

run "what_is_not_a_range_is_refused" {
  command = plan
  variables {
    client_cidrs = ["10.10.0.0"]
  }
  expect_failures = [var.client_cidrs]
}
