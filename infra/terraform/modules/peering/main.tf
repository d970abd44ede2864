# Cross-region VPC peering between the analysis datacenter (requester: its
# mirrors pull) and a producer datacenter, with routes on both sides. Only
# the private route tables get routes: nothing public crosses.

resource "aws_vpc_peering_connection" "this" {
  provider    = aws.requester
  vpc_id      = var.requester.vpc_id
  peer_vpc_id = var.accepter.vpc_id
  peer_region = var.accepter.region
  tags        = merge(var.tags, { Name = var.name })
}

resource "aws_vpc_peering_connection_accepter" "this" {
  provider                  = aws.accepter
  vpc_peering_connection_id = aws_vpc_peering_connection.this.id
  auto_accept               = true
  tags                      = merge(var.tags, { Name = var.name })
}

resource "aws_route" "requester" {
  provider                  = aws.requester
  count                     = length(var.requester.route_table_ids)
  route_table_id            = var.requester.route_table_ids[count.index]
  destination_cidr_block    = var.accepter.cidr
  vpc_peering_connection_id = aws_vpc_peering_connection.this.id
}

resource "aws_route" "accepter" {
  provider                  = aws.accepter
  count                     = length(var.accepter.route_table_ids)
  route_table_id            = var.accepter.route_table_ids[count.index]
  destination_cidr_block    = var.requester.cidr
  vpc_peering_connection_id = aws_vpc_peering_connection.this.id
}
