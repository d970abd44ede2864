"""Where Samsa runs: the multi-datacenter topology (topology.py) and the
programs that bring it up.

* topology.py: the model (ZooKeeper, the datacenter clusters behind their load
  balancers, the analysis cluster, the mirrors, the monitoring) and its TOML file; no
  processes, no sockets;
* local/: the lab that runs a topology on one machine
  (``python -m infra.local up|status|down``), with HAProxy as the load balancer;
* docker/: the services' container images, built offline, and the pipeline
  run as containers;
* render.py: the services' configuration for Terraform's environments,
  rendered from the same topology;
* cloud_secrets.py: a cloud environment's certificate authority, made by the
  operator for its secret store, and a host's certificate issued from it;
* host_secrets.py: what a cloud host reads from the secret store at boot (its
  certificate issued, its users and identities, the secured options), and a
  broker's provisioning of the users and ACLs in ZooKeeper;
* terraform/: the Terraform modules and environments (no Python);
* prometheus/: the alert rules (alerts.yml) and their promtool unit tests
  (no Python; the lab's Prometheus loads them: local/prometheus.py).

Nothing in broker/ or mirror/ imports this package.
"""
