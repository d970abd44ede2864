# terraform test, offline (a mocked provider with the AWS provider's schema
# from a local plugin directory): the mirror. `processes` instances; the
# metrics port (9095) admitted from metrics_cidrs alone (none by default);
# the settings production renders (environments/production/rendered/
# mirror-to-analysis.toml, read as it is) filled with every cluster's
# ZooKeeper. A cluster missing from zookeeper_connect fails the plan in
# templatestring itself ("Missing map element"), an error terraform test
# cannot expect (expect_failures takes only a module's own conditions, and
# the module has none for it): that refusal is not a run here. What the
# assertions cannot reach: each instance's boot script (inside module
# service-instances).

mock_provider "aws" {
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
  mock_data "aws_region" {
    defaults = {
      name = "us-east-2"
    }
  }
  mock_resource "aws_iam_role" {
    defaults = {
      arn = "arn:aws:iam::111122223333:role/samsa-test-analysis-mirror"
    }
  }
}

variables {
  name                   = "samsa-test-analysis"
  vpc_id                 = "vpc-0123456789abcdef0"
  subnet_ids             = ["subnet-a", "subnet-b", "subnet-c"]
  mirror_config_template = file("../../environments/production/rendered/mirror-to-analysis.toml")
  zookeeper_connect = {
    dc_us_east = "10.10.0.10:2181,10.10.16.10:2181,10.10.32.10:2181/dc-us-east"
    dc_eu_west = "10.20.0.10:2181,10.20.16.10:2181,10.20.32.10:2181/dc-eu-west"
    analysis   = "10.30.0.10:2181,10.30.16.10:2181,10.30.32.10:2181/analysis"
  }
  image        = "111122223333.dkr.ecr.us-east-2.amazonaws.com/samsa/samsa:0.1.0-aaaaaaaaaaaa"
  secrets_name = "samsa-test"
  ami_id       = "ami-0123456789abcdef0"
  kms_key_arn  = "arn:aws:kms:us-east-2:111122223333:key/00000000-0000-0000-0000-000000000000"
}

run "every_clusters_zookeeper_filled_in" {
  command = plan

  assert {
    condition = alltrue([for cluster, connect in var.zookeeper_connect :
    strcontains(local.config, "zookeeper = \"${connect}\"")])
    error_message = "every cluster's ZooKeeper (with its chroot) is in the mirror's settings"
  }
  assert {
    condition     = length(output.instance_ids) == 2
    error_message = "two mirror processes by default, an instance each"
  }
  assert {
    condition     = length(aws_vpc_security_group_ingress_rule.metrics) == 0
    error_message = "no metrics_cidrs: nobody may scrape the mirror"
  }
}

run "processes_and_the_metrics_port" {
  command = apply

  variables {
    processes     = 4
    metrics_cidrs = ["10.30.0.0/16", "192.168.10.0/24"]
  }

  assert {
    condition     = length(output.instance_ids) == 4 && output.instance_ids == module.service.instance_ids
    error_message = "an instance per process"
  }
  assert {
    condition     = toset([for r in aws_vpc_security_group_ingress_rule.metrics : r.cidr_ipv4]) == toset(["10.30.0.0/16", "192.168.10.0/24"])
    error_message = "the metrics port admits the ranges given, nothing else"
  }
  assert {
    condition = alltrue([for r in aws_vpc_security_group_ingress_rule.metrics :
    r.from_port == 9095 && r.to_port == 9095 && r.ip_protocol == "tcp" && r.security_group_id == module.service.security_group_id])
    error_message = "only port 9095, on the mirror's security group"
  }
  assert {
    condition     = output.security_group_id == module.service.security_group_id
    error_message = "the security_group_id output (the analysis brokers admit it) is the mirror instances'"
  }
}

run "no_process_is_refused" {
  command = plan
  variables {
    processes = 0
  }
  expect_failures = [var.processes]
}

run "more_than_20_processes_are_refused" {
  command = plan
  variables {
    processes = 21
  }
  expect_failures = [var.processes]
}

run "the_whole_internet_scraping_is_refused" {
  command = plan
  variables {
    metrics_cidrs = ["0.0.0.0/0"]
  }
  expect_failures = [var.metrics_cidrs]
}

run "a_range_wider_than_8_is_refused" {
  command = plan
  variables {
    metrics_cidrs = ["10.0.0.0/7"]
  }
  expect_failures = [var.metrics_cidrs]
}

run "a_secrets_name_with_a_space_is_refused" {
  command = plan
  variables {
    secrets_name = "samsa prod"
  }
  expect_failures = [var.secrets_name]
}
