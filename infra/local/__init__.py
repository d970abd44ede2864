"""The local lab: a topology (infra/topology.py) run on this machine.

* lab.py: the lab itself, as processes of this checkout or as containers
  (up, down, faults);
* lab_security.py: the secured lab's certificate authority, certificates,
  users, ACLs and ZooKeeper identities, made on the spot;
* status.py: what an environment runs and how it is doing (a lab's, or
  Terraform's local environment's), and its text;
* metrics.py: asking the lab's HTTP ports (a process's Prometheus /metrics;
  HTTPS as a user of a secured lab: HttpAccess);
* prometheus.py: the lab's Prometheus: its configuration from the topology,
  its command, its HTTP API (targets, alerts);
* command.py: how the local services' commands end (errors, exit status);
* __main__.py: ``python -m infra.local up|status|down``;
* topology.toml: the default topology;
* haproxy.py: HAProxy before a datacenter's brokers;
* container_runtime.py: the lab's processes as containers of the project's images;
* daemon.py: one service of the local environment run detached;
* airflow_stack.py: a real Airflow with the project's DAGs;
* pipeline.py: the whole pipeline (``make demo``), datacenters to warehouse;
* demo.py: the multi-datacenter part of ``make demo``;
* traffic.py: audited Avro traffic for the demo and the drills;
* drill.py: the pipeline under faults, nothing acknowledged lost (``make drill``);
* drill_loss.py: a deliberate loss the audit must report (``make drill-loss``);
* drill_network.py: the pipeline in network namespaces under network faults,
  nothing acknowledged lost (``make drill-network``);
* cloud_stand_ins.py: stand-ins for the cloud's services an instance asks
  at boot (Secrets Manager's GetSecretValue, signatures checked; the
  instance metadata service, IMDSv2), for the tests of the boot scripts and
  of what the hosts read;
* ceph_s3.py: a real S3 server (Ceph's RADOS gateway on a one-node Ceph) that
  the loader's S3 output is tested against;
* network/: the network lab: hosts in network namespaces, WAN links with
  latency, loss and bandwidth, and network faults (``python -m infra.local.network``).
"""
