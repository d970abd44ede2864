"""infra/terraform: `terraform fmt`, and the local environment applied for
real: `terraform init`, `validate`, `apply` (ZooKeeper, two datacenters behind
HAProxy, the analysis cluster, the mirror, the audit service, Airflow, each a
resource that starts real processes), messages produced through an output
load balancer address read back in the analysis cluster, a second apply with
3 brokers per datacenter (the datacenters are replaced, nothing else), and
`destroy` leaving no process. Terraform runs offline: terraform_data needs no
provider."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request

import pytest

from broker.client.producer import Producer
from broker.coordination.zk import make_client, start_client
from broker_helpers import wait_until
from infra.local.lab import Lab, busy_ports
from infra.topology import load_topology
from lab_helpers import processes_mentioning, topic_values

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TERRAFORM = shutil.which("terraform") or "terraform"     # on these machines: /usr/local/bin


def terraform(directory, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CLI_CONFIG_FILE="/dev/null", TF_IN_AUTOMATION="1")
    return subprocess.run([TERRAFORM, f"-chdir={directory}", *args, "-no-color"],
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_terraform_files_are_formatted():
    out = terraform(os.path.join(ROOT, "infra", "terraform"), "fmt", "-check", "-recursive",
                    "-diff")
    assert out.returncode == 0, out.stdout + out.stderr


def free_base_port() -> int:
    """A base port where the environment's ports (the topology's, and the
    audit's and Airflow's past it) are free now."""
    for base in range(42000, 60000, 1000):
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


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_local_environment_applies_changes_and_destroys(tmp_path):
    tree = tmp_path / "terraform"
    shutil.copytree(os.path.join(ROOT, "infra", "terraform"), tree,
                    ignore=shutil.ignore_patterns(".terraform*", "terraform.tfstate*"))
    env_dir = tree / "environments" / "local"
    state = tmp_path / "state"
    base = free_base_port()
    variables = ["-var", f"python={sys.executable}",
                 "-var", f"state_dir={state}", "-var", f"base_port={base}",
                 "-var", f"project_dir={ROOT}"]
    assert terraform(env_dir, "init", "-input=false").returncode == 0
    out = terraform(env_dir, "validate")
    assert out.returncode == 0, out.stdout + out.stderr
    try:
        out = terraform(env_dir, "apply", "-auto-approve", "-input=false", *variables)
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
        outputs = {k: v["value"] for k, v in json.loads(
            terraform(env_dir, "output", "-json").stdout).items()}

        # the outputs are the addresses the topology model computes for the
        # rendered topology (one source of truth for the port layout)
        topology = load_topology(str(state / "topology.toml"))
        assert outputs["load_balancers"] == {
            dc: f"127.0.0.1:{topology.lb_port(dc)}" for dc in ("dc-a", "dc-b")}
        assert outputs["zookeeper_connect"] == {
            c: topology.zookeeper_connect(c) for c in ("dc-a", "dc-b", "analysis")}
        with urllib.request.urlopen(outputs["audit_url"] + "/healthz", timeout=10) as r:
            assert r.read() == b"ok\n"
        with urllib.request.urlopen(outputs["airflow_url"] + "/api/v2/monitor/health",
                                    timeout=10) as r:
            assert r.status == 200

        # produce through dc-a's load balancer; the mirror copies it into analysis
        sent = {b"tf %d" % i for i in range(200)}
        with Producer(bootstrap=outputs["load_balancers"]["dc-a"], acks="flushed") as producer:
            for value in sorted(sent):
                producer.send("page-views", value)
        analysis = Lab.open(str(state / "analysis"))
        wait_until(lambda: sent <= set(topic_values(analysis, "analysis", "page-views",
                                                      range(2))), 60,
                   what="the mirror to copy into analysis")

        # 2 -> 3 brokers per datacenter: the datacenters (and the rendered
        # configuration) are replaced, nothing else
        changed = variables + ["-var", "brokers_per_dc=3"]
        plan = terraform(env_dir, "plan", "-input=false", *changed)
        replaced = sorted(line.split("#", 1)[1].split(" must be replaced")[0].strip()
                          for line in plan.stdout.splitlines() if "must be replaced" in line)
        assert replaced == ['module.datacenter["dc-a"].terraform_data.service',
                            'module.datacenter["dc-b"].terraform_data.service',
                            "terraform_data.config"], plan.stdout[-3000:]
        out = terraform(env_dir, "apply", "-auto-approve", "-input=false", *changed)
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
        zk = make_client(outputs["zookeeper_connect"]["dc-a"])
        start_client(zk, outputs["zookeeper_connect"]["dc-a"], timeout=10.0, what="test")
        try:
            assert sorted(zk.get_children("/brokers/ids")) == ["0", "1", "2"]
        finally:
            zk.stop()
            zk.close()
        # what dc-a stored before the change is still there (its data was kept)
        dc_a = Lab.open(str(state / "dc-a"))
        assert sent <= set(topic_values(dc_a, "dc-a", "page-views", range(3)))
    finally:
        out = terraform(env_dir, "destroy", "-auto-approve", "-input=false", *variables,
                        "-var", "brokers_per_dc=3")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert processes_mentioning(str(state)) == []
