output "load_balancers" {
  description = "Where each datacenter's producers connect (its HAProxy), by datacenter."
  value       = { for dc in var.datacenters : dc => "127.0.0.1:${local.cluster_base[dc]}" }
}

output "zookeeper_connect" {
  description = "ZooKeeper connect string (with chroot) of each cluster."
  value       = { for c in local.clusters : c => "${local.zookeeper}/${c}" }
}

output "audit_url" {
  description = "The audit service: its report page, /api/verdicts, /metrics."
  value       = local.audit_url
}

output "airflow_url" {
  description = "The Airflow UI (login admin; the password: python -m infra.local.airflow_stack status --dir <state_dir>/airflow)."
  value       = var.airflow ? "http://127.0.0.1:${local.airflow_port}" : null
}

output "runtime" {
  description = "How the components run: processes, or containers (docker ps --filter label=org.samsa.lab.state-dir=<state_dir>/<component> lists a component's)."
  value       = var.runtime
}

output "state_dir" {
  description = "Where the processes keep their state, logs and data."
  value       = local.state_dir
}
