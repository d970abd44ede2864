output "load_balancers" {
  description = "Where each datacenter's producers connect, by datacenter."
  value = {
    "dc-us-east" = module.dc_us_east.load_balancer_address
    "dc-eu-west" = module.dc_eu_west.load_balancer_address
  }
}

output "zookeeper_connect" {
  description = "ZooKeeper connect string (with chroot) of each cluster."
  value = {
    "dc-us-east" = module.dc_us_east.zookeeper_connect
    "dc-eu-west" = module.dc_eu_west.zookeeper_connect
    "analysis"   = module.analysis.zookeeper_connect
  }
}

output "broker_data_volume_gb" {
  description = "Each broker's data volume size per cluster (the broker-cluster module's formula)."
  value = {
    "dc-us-east" = module.dc_us_east.data_volume_gb
    "dc-eu-west" = module.dc_eu_west.data_volume_gb
    "analysis"   = module.analysis.data_volume_gb
  }
}

output "audit_url" {
  description = "The audit report (inside the VPC; operator_cidrs may reach it)."
  value       = module.audit.url
}

output "airflow_url" {
  description = "The Airflow UI (operator_cidrs may reach it; the VPC when none are given)."
  value       = module.analysis_stack.airflow_url
}

output "warehouse" {
  description = "Where the loader writes the Parquet."
  value       = module.analysis_stack.warehouse
}

output "registry" {
  description = "The environment's registry (module registry): make push-images REGISTRY=... pushes the images there."
  value       = module.registry.registry
}
