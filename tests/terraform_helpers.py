"""Helpers of the tests that run Terraform's local environment
(tests/infra/test_terraform_local.py, tests/containers/test_lab_containers.py):
terraform itself, offline (terraform_data needs no provider), a copy of
infra/terraform to run it in, a base port where the environment's ports
are free, and messages sent through it into the analysis cluster."""
from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess

from broker.client.producer import Producer
from broker_helpers import topic_values, wait_until
from infra.local.lab import Lab, busy_ports
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


def free_base_port() -> int:
    """A base port where the environment's ports (the topology's, and the
    audit's and Airflow's past it) are free now; tried in random order, so
    that two runs at once rarely race for the same."""
    for base in random.sample(range(42000, 60000, 1000), 18):
        topology = load_topology(os.path.join(ROOT, "infra", "local", "topology.toml"),
                                 {"base_port": str(base)})
        extra = [base + 500, base + 501]
        free = []
        for port in extra:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                    free.append(port)
                except OSError:
                    pass
        if not busy_ports(topology) and len(free) == len(extra):
            return base
    raise RuntimeError("no free base port")


def send_through_mirror(outputs: dict, state_dir, values: set[bytes], analysis_brokers: int,
                        topic: str = "page-views", timeout: float = 60.0) -> None:
    """Produce ``values`` through dc-a's load balancer (the environment's
    ``outputs``; acks=flushed) and wait until the mirror has copied every one
    into the analysis cluster (its lab in ``state_dir``/analysis)."""
    with Producer(bootstrap=outputs["load_balancers"]["dc-a"], acks="flushed") as producer:
        for value in sorted(values):
            producer.send(topic, value)
    analysis = Lab.open(os.path.join(str(state_dir), "analysis"))
    wait_until(lambda: values <= set(topic_values(analysis, "analysis", topic,
                                                  range(analysis_brokers))),
               timeout, interval=0.2, what="the mirror to copy into analysis")
