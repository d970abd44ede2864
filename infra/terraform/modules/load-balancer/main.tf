# The datacenter's load balancer: an internal network load balancer (TCP)
# spreading producers over the brokers, with the lab's HAProxy health checks
# (TCP connect, fall/rise), cross-zone.

locals {
  tags = merge(var.tags, { "samsa:module" = "load-balancer" })
}

resource "aws_security_group" "lb" {
  name        = "${var.name}-lb"
  description = "Samsa load balancer: producers in, brokers out"
  vpc_id      = var.vpc_id
  tags        = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "producers" {
  for_each          = toset(var.producer_cidrs)
  security_group_id = aws_security_group.lb.id
  description       = "Producers"
  ip_protocol       = "tcp"
  from_port         = var.port
  to_port           = var.port
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_egress_rule" "brokers" {
  security_group_id = aws_security_group.lb.id
  description       = "To the brokers and their health checks"
  ip_protocol       = "tcp"
  from_port         = 9092
  to_port           = 9092
  cidr_ipv4         = data.aws_vpc.this.cidr_block
}

data "aws_vpc" "this" {
  id = var.vpc_id
}

resource "aws_lb" "this" {
  name                             = "${var.name}-nlb"
  load_balancer_type               = "network"
  internal                         = true
  subnets                          = var.subnet_ids
  security_groups                  = [aws_security_group.lb.id]
  enable_cross_zone_load_balancing = true
  enable_deletion_protection       = true
  tags                             = local.tags
}

resource "aws_lb_target_group" "brokers" {
  name                   = "${var.name}-brokers"
  port                   = 9092
  protocol               = "TCP"
  target_type            = "ip"
  vpc_id                 = var.vpc_id
  deregistration_delay   = 30
  connection_termination = true

  health_check {
    protocol            = "TCP"
    port                = "traffic-port"
    interval            = var.health_check.interval_seconds
    timeout             = var.health_check.timeout_seconds # below the interval: AWS's TCP default, 10 s, is not
    unhealthy_threshold = var.health_check.fall
    healthy_threshold   = var.health_check.rise
  }

  tags = local.tags
}

resource "aws_lb_target_group_attachment" "broker" {
  count            = length(var.broker_private_ips)
  target_group_arn = aws_lb_target_group.brokers.arn
  target_id        = var.broker_private_ips[count.index]
  port             = 9092
}

resource "aws_lb_listener" "producers" {
  load_balancer_arn        = aws_lb.this.arn
  port                     = var.port
  protocol                 = "TCP"
  tcp_idle_timeout_seconds = var.idle_timeout_seconds

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.brokers.arn
  }

  tags = local.tags
}
