# terraform test, offline (a mocked provider with the AWS provider's schema
# from a local plugin directory): what the network must keep true.

mock_provider "aws" {
  mock_resource "aws_cloudwatch_log_group" {
    defaults = {
      arn = "arn:aws:logs:eu-west-1:123456789012:log-group:/samsa/samsa-test/vpc-flow"
    }
  }
  mock_resource "aws_iam_role" {
    defaults = {
      arn = "arn:aws:iam::123456789012:role/samsa-test-vpc-flow"
    }
  }
  mock_resource "aws_kms_key" {
    defaults = {
      arn = "arn:aws:kms:eu-west-1:123456789012:key/00000000-0000-0000-0000-000000000000"
    }
  }
  mock_data "aws_region" {
    defaults = {
      name = "eu-west-1"
    }
  }
  mock_data "aws_caller_identity" {
    defaults = {
      account_id = "123456789012"
    }
  }
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
}

variables {
  name               = "samsa-test"
  cidr               = "10.20.0.0/16"
  availability_zones = ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
}

run "s3_goes_by_the_gateway_endpoint_not_the_nat" {
  command = apply

  assert {
    condition     = aws_vpc_endpoint.s3.vpc_endpoint_type == "Gateway"
    error_message = "S3 must be reached by a gateway endpoint (free) rather than the NAT gateways (billed per GB)"
  }
  assert {
    condition     = aws_vpc_endpoint.s3.service_name == "com.amazonaws.eu-west-1.s3"
    error_message = "the endpoint must be the region's S3"
  }
  assert {
    condition     = length(aws_vpc_endpoint.s3.route_table_ids) == 3 && alltrue([for t in aws_route_table.private : contains(aws_vpc_endpoint.s3.route_table_ids, t.id)])
    error_message = "every private subnet's route table must route S3 by the endpoint"
  }
}

run "subnets_one_private_and_one_public_per_zone" {
  command = plan

  assert {
    condition     = [for s in aws_subnet.private : s.cidr_block] == ["10.20.0.0/20", "10.20.16.0/20", "10.20.32.0/20"]
    error_message = "the private /20s are cut from the start of the range"
  }
  assert {
    condition     = [for s in aws_subnet.public : s.cidr_block] == ["10.20.128.0/20", "10.20.144.0/20", "10.20.160.0/20"]
    error_message = "the public /20s are cut from the second half"
  }
  assert {
    condition     = alltrue([for s in aws_subnet.public : s.map_public_ip_on_launch == false])
    error_message = "nothing gets a public address at launch"
  }
}

run "a_range_too_small_is_refused" {
  command = plan

  variables {
    cidr = "10.20.0.0/20"
  }
  expect_failures = [var.cidr]
}

run "one_zone_is_refused" {
  command = plan

  variables {
    availability_zones = ["eu-west-1a"]
  }
  expect_failures = [var.availability_zones]
}
