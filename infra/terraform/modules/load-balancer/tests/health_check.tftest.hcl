# terraform test, offline (a mocked provider with the AWS provider's schema
# from a local plugin directory): the brokers' target group's health check as
# AWS takes it. The named defect: an interval of 5 s with no timeout, which
# AWS refuses (a TCP check's timeout defaults to 10 s, and must be below the
# interval). And the variable refuses what AWS would.

mock_provider "aws" {
  mock_data "aws_vpc" {
    defaults = {
      cidr_block = "10.10.0.0/16"
    }
  }
}

variables {
  name               = "samsa-test"
  vpc_id             = "vpc-0123456789abcdef0"
  subnet_ids         = ["subnet-a", "subnet-b", "subnet-c"]
  broker_private_ips = ["10.10.1.20", "10.10.2.20", "10.10.3.20"]
  producer_cidrs     = ["10.10.0.0/16"]
}

run "the_timeout_is_below_the_interval" {
  command = plan

  assert {
    condition = (aws_lb_target_group.brokers.health_check[0].timeout != null
    && aws_lb_target_group.brokers.health_check[0].timeout < aws_lb_target_group.brokers.health_check[0].interval)
    error_message = "AWS refuses a health check whose timeout is not below its interval (its TCP default is 10 s)"
  }
  assert {
    condition     = aws_lb_target_group.brokers.health_check[0].timeout >= 2
    error_message = "AWS's least timeout is 2 s"
  }
}

run "a_timeout_not_below_the_interval_is_refused" {
  command = plan

  variables {
    health_check = { interval_seconds = 5, timeout_seconds = 5, fall = 2, rise = 2 }
  }
  expect_failures = [var.health_check]
}

run "an_interval_below_aws_least_is_refused" {
  command = plan

  variables {
    health_check = { interval_seconds = 1, timeout_seconds = 2, fall = 2, rise = 2 }
  }
  expect_failures = [var.health_check]
}
