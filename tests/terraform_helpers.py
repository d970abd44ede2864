"""Helpers of the tests that run Terraform's local environment
(tests/infra/test_terraform_local.py, tests/containers/test_lab_containers.py):
terraform itself, offline (terraform_data needs no provider), a copy of
infra/terraform to run it in, a base port where the environment's ports
are free, and messages sent through it into the analysis cluster."""
from __future__ import annotations

import os
import shutil
import subprocess

from broker.client.producer import Producer
from broker.service_kit import ports
from broker_helpers import topic_values, wait_until
from infra.local.lab import Lab
from infra.topology import load_topology

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TERRAFORM = shutil.which("terraform") or "terraform"     # on these machines: /usr/local/bin


def terraform(directory, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CLI_CONFIG_FILE="/dev/null", TF_IN_AUTOMATION="1")
    return subprocess.run([TERRAFORM, f"-chdir={directory}", *args, "-no-color"],
                          env=env, capture_output=True, text=True, timeout=timeout)


def local_environment(tmp_path) -> str:
    """infra/terraform copied into ``tmp_path`` (without anyone's state), and
    the path of its environments/local there."""
    tree = tmp_path / "terraform"
    shutil.copytree(os.path.join(ROOT, "infra", "terraform"), tree,
                    ignore=shutil.ignore_patterns(".terraform*", "terraform.tfstate*"))
    return str(tree / "environments" / "local")


# the most brokers a test scales a datacenter to (test_terraform_local: 2 -> 3)
LARGEST_DATACENTER = 3


def environment_ports(base: int) -> list[tuple[int, str]]:
    """Every port the local environment at ``base`` may listen on, whichever
    variables a test applies it with: the default topology's at
    LARGEST_DATACENTER brokers per datacenter, the audit's and Airflow's past
    the mirrors' block (environments/local/main.tf), and the rest of that span
    (fewer datacenters move the mirrors, the audit and Airflow down into it)."""
    topology = load_topology(os.path.join(ROOT, "infra", "local", "topology.toml"),
                             {"base_port": str(base),
                              "datacenters.dc-a.brokers": str(LARGEST_DATACENTER),
                              "datacenters.dc-b.brokers": str(LARGEST_DATACENTER)})
    audit = base + 100 * (len(topology.clusters()) + 2)
    named = [*topology.ports(), (audit, "audit"), (audit + 1, "Airflow")]
    taken = {port for port, _ in named}
    return named + [(port, "another layout's") for port in range(base, audit + 2)
                    if port not in taken]


def free_base_port() -> int:
    """A base port where every port of ``environment_ports`` is free now and
    outside the ephemeral range (broker/service_kit/ports.py). In that range
    an outgoing connection's source port (the mirror's, Airflow's, a
    client's) can take one of them between this check and a later apply (a
    CI run lost the third dc-a broker's metrics port so)."""
    return ports.free_base_port(environment_ports)


def send_through_mirror(outputs: dict, state_dir, values: set[bytes], analysis_brokers: int,
                        topic: str = "page-views", timeout: float = 60.0) -> None:
    """Produce ``values`` through dc-a's load balancer (the environment's
    ``outputs``; acks=flushed; the broker reached picks the partition, one it
    leads where the cluster replicates) and wait until the mirror has copied
    every one into the analysis cluster (its lab in ``state_dir``/analysis)."""
    with Producer(bootstrap=outputs["load_balancers"]["dc-a"], acks="flushed",
                  partitioner="any") as producer:
        for value in sorted(values):
            producer.send(topic, value)
    analysis = Lab.open(os.path.join(str(state_dir), "analysis"))
    wait_until(lambda: values <= set(topic_values(analysis, "analysis", topic,
                                                  range(analysis_brokers))),
               timeout, interval=0.2, what="the mirror to copy into analysis")
