# The multi-datacenter environment on this machine: the same shape as the
# cloud environments (producer datacenters behind load balancers, the
# analysis cluster, the mirror, the audit service, Airflow), each component a
# resource that starts and stops real processes (modules/local-service):
# processes of this checkout, or with runtime = "containers" containers of
# the project's images, each a `docker run` the component's up command
# supervises (Airflow's from samsa/analysis, with the DAGs built into it).
#
#   terraform init && terraform apply -auto-approve     (or: make tf-local-up)
#   terraform destroy -auto-approve                     (or: make tf-local-down)

locals {
  project_dir = var.project_dir != "" ? var.project_dir : abspath("${path.module}/../../../..")
  python = var.python != "" ? var.python : (
    fileexists("${local.project_dir}/.venv/bin/python") ? "${local.project_dir}/.venv/bin/python" : "python3"
  )
  state_dir = var.state_dir != "" ? abspath(var.state_dir) : "${local.project_dir}/.tf-local"
  topology  = "${local.state_dir}/topology.toml"
  warehouse = "${local.state_dir}/warehouse.toml"
  clusters  = concat(var.datacenters, ["analysis"])

  # infra/topology.py's port layout (tests/infra/test_terraform_local.py holds
  # these to what the model computes): cluster c from base + 100 * (c + 1)
  cluster_base = { for i, c in local.clusters : c => var.base_port + 100 * (i + 1) }
  zookeeper    = "127.0.0.1:${var.base_port}"
  # past the mirrors' block (base + 100 * (clusters + 1))
  audit_port   = var.base_port + 100 * (length(local.clusters) + 2)
  airflow_port = local.audit_port + 1
  audit_url    = "http://127.0.0.1:${local.audit_port}"

  topology_toml = templatefile("${path.module}/topology.toml.tftpl", {
    base_port        = var.base_port
    datacenters      = var.datacenters
    brokers_per_dc   = var.brokers_per_dc
    analysis_brokers = var.analysis_brokers
    partitions       = var.partitions
    replication      = var.replication_factor
    retention_ms     = var.retention_hours * 3600000
    whitelist        = var.mirror_whitelist
    mirror_processes = var.mirror_processes
  })
  warehouse_toml = templatefile("${path.module}/warehouse.toml.tftpl", {
    zookeeper = "${local.zookeeper}/analysis"
    output    = "${local.state_dir}/warehouse"
    audit_url = local.audit_url
  })

  lab  = "${local.python} -m infra.local"
  down = "${local.python} -m infra.local down -q --dir"
  # the audit service: this checkout's program, or the samsa image's entrypoint
  audit_program = var.runtime == "containers" ? "audit" : "${local.python} -m audit"
}

# The topology and the DAGs' settings, rendered into the state directory: the
# components read them when they start.
resource "terraform_data" "config" {
  triggers_replace = [local.topology_toml, local.warehouse_toml]

  provisioner "local-exec" {
    command = "mkdir -p \"$STATE\" && printf '%s' \"$TOPOLOGY\" > \"$STATE/topology.toml\" && printf '%s' \"$WAREHOUSE\" > \"$STATE/warehouse.toml\""
    environment = {
      STATE     = local.state_dir
      TOPOLOGY  = local.topology_toml
      WAREHOUSE = local.warehouse_toml
    }
  }
}

module "zookeeper" {
  source       = "../../modules/local-service"
  name         = "zookeeper"
  working_dir  = local.project_dir
  up_command   = "${local.lab} up -q --dir ${local.state_dir}/zookeeper --topology ${local.topology} --only zookeeper --runtime ${var.runtime} --insecure"
  down_command = "${local.down} ${local.state_dir}/zookeeper"
  triggers     = { base_port = tostring(var.base_port), runtime = var.runtime }
  depends_on   = [terraform_data.config]
}

module "datacenter" {
  source       = "../../modules/local-service"
  for_each     = toset(var.datacenters)
  name         = "cluster ${each.key}"
  working_dir  = local.project_dir
  up_command   = "${local.lab} up -q --dir ${local.state_dir}/${each.key} --topology ${local.topology} --only cluster:${each.key} --runtime ${var.runtime} --insecure"
  down_command = "${local.down} ${local.state_dir}/${each.key}"
  triggers = {
    brokers         = tostring(var.brokers_per_dc)
    partitions      = tostring(var.partitions)
    retention_hours = tostring(var.retention_hours)
    base_port       = tostring(var.base_port)
    position        = tostring(index(local.clusters, each.key))
    runtime         = var.runtime
  }
  depends_on = [terraform_data.config, module.zookeeper]
}

module "analysis" {
  source       = "../../modules/local-service"
  name         = "cluster analysis"
  working_dir  = local.project_dir
  up_command   = "${local.lab} up -q --dir ${local.state_dir}/analysis --topology ${local.topology} --only cluster:analysis --runtime ${var.runtime} --insecure"
  down_command = "${local.down} ${local.state_dir}/analysis"
  triggers = {
    brokers         = tostring(var.analysis_brokers)
    partitions      = tostring(var.partitions)
    retention_hours = tostring(var.retention_hours)
    base_port       = tostring(var.base_port)
    position        = tostring(length(var.datacenters))
    runtime         = var.runtime
  }
  depends_on = [terraform_data.config, module.zookeeper]
}

module "mirror" {
  source       = "../../modules/local-service"
  name         = "mirror to-analysis"
  working_dir  = local.project_dir
  up_command   = "${local.lab} up -q --dir ${local.state_dir}/mirror --topology ${local.topology} --only mirror:to-analysis --runtime ${var.runtime} --insecure"
  down_command = "${local.down} ${local.state_dir}/mirror"
  triggers = {
    sources   = join(",", var.datacenters)
    whitelist = var.mirror_whitelist
    processes = tostring(var.mirror_processes)
    base_port = tostring(var.base_port)
    runtime   = var.runtime
  }
  depends_on = [terraform_data.config, module.datacenter, module.analysis]
}

module "audit" {
  source       = "../../modules/local-service"
  name         = "audit service"
  working_dir  = local.project_dir
  up_command   = "${local.python} -m infra.local.daemon up --runtime ${var.runtime} --dir ${local.state_dir}/audit --name audit --ready-url ${local.audit_url}/healthz -- ${local.audit_program} serve --zookeeper ${local.zookeeper}/analysis --http-port ${local.audit_port}"
  down_command = "${local.python} -m infra.local.daemon down --dir ${local.state_dir}/audit"
  triggers     = { port = tostring(local.audit_port), zookeeper = "${local.zookeeper}/analysis", runtime = var.runtime }
  depends_on   = [terraform_data.config, module.analysis]
}

module "airflow" {
  source       = "../../modules/local-service"
  count        = var.airflow ? 1 : 0
  name         = "airflow"
  working_dir  = local.project_dir
  up_command   = "${local.python} -m infra.local.airflow_stack up --runtime ${var.runtime} --dir ${local.state_dir}/airflow --port ${local.airflow_port} --warehouse-config ${local.warehouse}"
  down_command = "${local.python} -m infra.local.airflow_stack down --dir ${local.state_dir}/airflow"
  triggers     = { port = tostring(local.airflow_port), runtime = var.runtime }
  depends_on   = [terraform_data.config, module.audit]
}
