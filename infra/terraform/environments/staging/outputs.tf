output "load_balancers" {
  description = "Where the datacenter's producers connect."
  value       = { "dc-staging" = module.dc_staging.load_balancer_address }
}

output "zookeeper_connect" {
  description = "ZooKeeper connect string (with chroot) of each cluster."
  value = {
    "dc-staging" = module.dc_staging.zookeeper_connect
    "analysis"   = module.analysis.zookeeper_connect
  }
}
