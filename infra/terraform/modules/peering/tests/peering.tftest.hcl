# terraform test, offline (mocked providers with the AWS provider's schema
# from a local plugin directory): cross-region peering between the analysis
# datacenter (requester) and a producer datacenter (accepter). The connection
# asked for from the requester's VPC to the accepter's, in the accepter's
# region; accepted on the accepter's side, by its provider (its region); a
# route to the other side's range in every private route table given, on each
# side, by the peering. Which provider (so which region) makes a resource is
# not an attribute: each side's mock marks what it makes (a computed
# attribute's stand-in value, "made-by-<side>"), and the assertions read the
# mark. What a mock cannot show: AWS refusing overlapping ranges or a
# cross-region connection accepted on the requester's side.

mock_provider "aws" {
  alias = "requester"
  mock_resource "aws_vpc_peering_connection" {
    defaults = {
      accept_status = "made-by-requester"
    }
  }
  mock_resource "aws_vpc_peering_connection_accepter" {
    defaults = {
      accept_status = "made-by-requester"
    }
  }
  mock_resource "aws_route" {
    defaults = {
      origin = "made-by-requester"
    }
  }
}

mock_provider "aws" {
  alias = "accepter"
  mock_resource "aws_vpc_peering_connection" {
    defaults = {
      accept_status = "made-by-accepter"
    }
  }
  mock_resource "aws_vpc_peering_connection_accepter" {
    defaults = {
      accept_status = "made-by-accepter"
    }
  }
  mock_resource "aws_route" {
    defaults = {
      origin = "made-by-accepter"
    }
  }
}

variables {
  name = "samsa-test-analysis-use1"
  requester = {
    vpc_id          = "vpc-0analysis0000000"
    cidr            = "10.30.0.0/16"
    route_table_ids = ["rtb-analysis-a", "rtb-analysis-b", "rtb-analysis-c"]
  }
  accepter = {
    vpc_id          = "vpc-0useast00000000"
    cidr            = "10.10.0.0/16"
    route_table_ids = ["rtb-useast-a", "rtb-useast-b"]
    region          = "us-east-1"
  }
}

run "the_connection_asked_for_and_accepted_across_regions" {
  command = apply

  assert {
    condition = (aws_vpc_peering_connection.this.vpc_id == "vpc-0analysis0000000"
      && aws_vpc_peering_connection.this.peer_vpc_id == "vpc-0useast00000000"
    && aws_vpc_peering_connection.this.peer_region == "us-east-1")
    error_message = "the requester's VPC asks for the accepter's, in the accepter's region"
  }
  assert {
    condition     = aws_vpc_peering_connection.this.accept_status == "made-by-requester"
    error_message = "the connection is asked for in the requester's region (its provider)"
  }
  assert {
    condition = (aws_vpc_peering_connection_accepter.this.vpc_peering_connection_id == aws_vpc_peering_connection.this.id
    && aws_vpc_peering_connection_accepter.this.auto_accept)
    error_message = "the accepter accepts that connection"
  }
  assert {
    condition     = aws_vpc_peering_connection_accepter.this.accept_status == "made-by-accepter"
    error_message = "the connection is accepted in the accepter's region (its provider): a cross-region connection cannot be accepted by the requester"
  }
  assert {
    condition     = output.id == aws_vpc_peering_connection.this.id
    error_message = "the id output is the connection's"
  }
  assert {
    condition     = aws_vpc_peering_connection.this.tags.Name == "samsa-test-analysis-use1" && aws_vpc_peering_connection_accepter.this.tags.Name == "samsa-test-analysis-use1"
    error_message = "both sides carry the peering's name"
  }
}

run "routes_both_ways_in_every_private_route_table" {
  command = apply

  assert {
    condition     = [for r in aws_route.requester : r.route_table_id] == ["rtb-analysis-a", "rtb-analysis-b", "rtb-analysis-c"]
    error_message = "a route in each of the requester's private route tables"
  }
  assert {
    condition = alltrue([for r in aws_route.requester :
      r.destination_cidr_block == "10.10.0.0/16"
      && r.vpc_peering_connection_id == aws_vpc_peering_connection.this.id
    && r.origin == "made-by-requester"])
    error_message = "the requester's routes lead to the accepter's range by the peering, made in the requester's region"
  }
  assert {
    condition     = [for r in aws_route.accepter : r.route_table_id] == ["rtb-useast-a", "rtb-useast-b"]
    error_message = "a route in each of the accepter's private route tables"
  }
  assert {
    condition = alltrue([for r in aws_route.accepter :
      r.destination_cidr_block == "10.30.0.0/16"
      && r.vpc_peering_connection_id == aws_vpc_peering_connection.this.id
    && r.origin == "made-by-accepter"])
    error_message = "the accepter's routes lead to the requester's range by the peering, made in the accepter's region"
  }
}
