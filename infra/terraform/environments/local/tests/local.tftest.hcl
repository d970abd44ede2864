# terraform test, offline (no provider: terraform_data is built in): the
# local environment planned, never applied here (an apply starts the real
# processes: tests/infra/test_terraform_local.py applies it). What the plan
# must show: the port layout infra/topology.py computes, the topology every
# component reads, one component per part, and inputs refused early.

variables {
  state_dir   = "/var/tmp/samsa-tftest-local"
  python      = "/venv/bin/python"
  project_dir = "/srv/samsa"
}

run "the_ports_are_laid_out_as_the_topology_model_lays_them" {
  command = plan

  # cluster c from base + 100 * (c + 1); the audit past the mirrors' block
  assert {
    condition     = output.load_balancers == { "dc-a" = "127.0.0.1:21100", "dc-b" = "127.0.0.1:21200" }
    error_message = "each datacenter's load balancer sits at its cluster's base port"
  }
  assert {
    condition     = output.zookeeper_connect == { "dc-a" = "127.0.0.1:21000/dc-a", "dc-b" = "127.0.0.1:21000/dc-b", "analysis" = "127.0.0.1:21000/analysis" }
    error_message = "one ZooKeeper, a chroot per cluster"
  }
  assert {
    condition     = output.audit_url == "http://127.0.0.1:21500" && output.airflow_url == "http://127.0.0.1:21501"
    error_message = "the audit and Airflow sit past the mirrors' block"
  }
  assert {
    condition     = output.state_dir == "/var/tmp/samsa-tftest-local" && output.runtime == "processes"
    error_message = "the state directory and the runtime are the ones given"
  }
}

run "every_component_reads_the_rendered_topology" {
  command = plan

  variables {
    brokers_per_dc     = 3
    analysis_brokers   = 4
    replication_factor = 3
    retention_hours    = 24
  }
  assert {
    condition     = strcontains(terraform_data.config.triggers_replace[0], "base_port = 21000\n") && length(regexall("\nbrokers = 3\n", terraform_data.config.triggers_replace[0])) == 2
    error_message = "the topology names the base port and each datacenter's brokers"
  }
  assert {
    condition     = strcontains(terraform_data.config.triggers_replace[0], "[analysis]\nname = \"analysis\"\nbrokers = 4\n")
    error_message = "the analysis cluster's brokers"
  }
  assert {
    condition     = length(regexall("replication_factor = 3\n", terraform_data.config.triggers_replace[0])) == 3
    error_message = "every cluster replicates as asked"
  }
  assert {
    condition     = length(regexall("log.retention_ms=86400000", terraform_data.config.triggers_replace[0])) == 3
    error_message = "retention_hours reaches every cluster's brokers in milliseconds"
  }
  assert {
    condition     = strcontains(terraform_data.config.triggers_replace[0], "sources = [\"dc-a\", \"dc-b\"]")
    error_message = "the mirror copies every datacenter"
  }
  assert {
    condition     = strcontains(terraform_data.config.triggers_replace[1], "zookeeper = \"127.0.0.1:21000/analysis\"") && strcontains(terraform_data.config.triggers_replace[1], "output = \"/var/tmp/samsa-tftest-local/warehouse\"")
    error_message = "the DAGs read the analysis cluster and write into the state directory"
  }
  assert {
    condition     = module.datacenter["dc-a"].name == "cluster dc-a" && module.datacenter["dc-b"].name == "cluster dc-b"
    error_message = "a component per datacenter"
  }
}

run "airflow_can_be_left_out" {
  command = plan

  variables {
    airflow = false
  }
  assert {
    condition     = length(module.airflow) == 0 && output.airflow_url == null
    error_message = "without Airflow, no component and no URL"
  }
}

run "one_datacenter_moves_the_analysis_cluster_down" {
  command = plan

  variables {
    datacenters = ["dc-a"]
    base_port   = 30000
  }
  assert {
    condition     = output.load_balancers == { "dc-a" = "127.0.0.1:30100" } && output.audit_url == "http://127.0.0.1:30400"
    error_message = "the layout follows the clusters: dc-a, analysis, the mirrors, then the audit"
  }
}

run "a_datacenter_named_analysis_is_refused" {
  command = plan

  variables {
    datacenters = ["dc-a", "analysis"]
  }
  expect_failures = [var.datacenters]
}

run "more_replicas_than_brokers_are_refused" {
  command = plan

  variables {
    brokers_per_dc     = 2
    replication_factor = 3
  }
  expect_failures = [var.replication_factor]
}

run "an_unknown_runtime_is_refused" {
  command = plan

  variables {
    runtime = "pods"
  }
  expect_failures = [var.runtime]
}

run "a_privileged_base_port_is_refused" {
  command = plan

  variables {
    base_port = 80
  }
  expect_failures = [var.base_port]
}
