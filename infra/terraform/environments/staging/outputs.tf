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
