"""infra/terraform: `terraform fmt`, and the local environment applied for
real: `terraform init`, `validate`, `apply` (ZooKeeper, two datacenters behind
HAProxy, the analysis cluster, the mirror, the audit service, Airflow, each a
resource that starts real processes), `python -m infra.local status` reading
all of them from the state directory, messages produced through an output
load balancer address read back in the analysis cluster, a second apply with
3 brokers per datacenter (the datacenters are replaced, nothing else), and
`destroy` leaving no process; the `runtime` variable validated and carried
into every component's command, Airflow's included (the containers runtime
applied for real: tests/containers/test_lab_containers.py, Airflow's from
its image: tests/containers/test_airflow_containers.py). Terraform runs offline:
terraform_data needs no provider."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections import Counter
from dataclasses import dataclass

import pytest

from broker.coordination.zk import make_client, start_client
from broker.service_kit.ports import ephemeral_port_range
from infra.local.lab import Lab
from infra.topology import load_topology
from lab_helpers import processes_mentioning, topic_values
from terraform_helpers import (ROOT, environment_ports, free_base_port, local_environment,
                               send_through_mirror, terraform)


def test_terraform_files_are_formatted():
    out = terraform(os.path.join(ROOT, "infra", "terraform"), "fmt", "-check", "-recursive",
                    "-diff")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_environment_is_placed_outside_the_ephemeral_range():
    # A CI run failed the 2 -> 3 brokers apply below: the base port had been
    # picked in the ephemeral range with only the 2-broker ports checked, and
    # an outgoing connection's source port took dc-a broker 2's metrics port.
    low, high = ephemeral_port_range()
    for _ in range(20):
        ports = environment_ports(free_base_port())
        assert not [port for port, _ in ports if low <= port <= high], ports
        assert {"dc-a broker 2 metrics", "dc-b broker 2 metrics", "audit",
                "Airflow"} <= {what for _, what in ports}


@pytest.fixture(scope="module")
def initialised(tmp_path_factory):
    """The local environment copied and `terraform init`ed, for plans."""
    env_dir = local_environment(tmp_path_factory.mktemp("tf"))
    out = terraform(env_dir, "init", "-input=false")
    assert out.returncode == 0, out.stdout + out.stderr
    return env_dir


def planned_up_commands(env_dir, *variables: str) -> dict[str, str]:
    """Each component's up command (modules/local-service keeps it in its
    input) in the plan of a fresh apply, by module address."""
    out = terraform(env_dir, "plan", "-input=false", "-out=plan.bin", *variables)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    plan = json.loads(terraform(env_dir, "show", "-json", "plan.bin").stdout)
    return {change["module_address"]: change["change"]["after"]["input"]["up"]
            for change in plan["resource_changes"]
            if change["type"] == "terraform_data" and change.get("module_address")}


def test_runtime_must_be_processes_or_containers(initialised):
    out = terraform(initialised, "plan", "-input=false", "-var", "runtime=pods")
    assert out.returncode != 0
    assert 'runtime must be "processes" or "containers"' in " ".join(out.stderr.split())


@pytest.mark.parametrize("runtime", ["processes", "containers"])
def test_every_component_runs_in_the_runtime(initialised, runtime):
    commands = planned_up_commands(initialised, "-var", f"runtime={runtime}",
                                   "-var", "python=/venv/bin/python")
    assert sorted(commands) == ['module.airflow[0]', 'module.analysis',
                                'module.audit', 'module.datacenter["dc-a"]',
                                'module.datacenter["dc-b"]', 'module.mirror',
                                'module.zookeeper']
    for address, command in commands.items():
        assert f" --runtime {runtime} " in command + " ", (address, command)
    assert commands["module.airflow[0]"].startswith(
        "/venv/bin/python -m infra.local.airflow_stack up --runtime "), commands
    # the audit: this checkout's program, or the samsa image's entrypoint
    audit = commands["module.audit"].split(" -- ", 1)[1]
    assert audit.startswith("audit serve " if runtime == "containers"
                            else "/venv/bin/python -m audit serve "), audit


@dataclass
class Applied:
    env_dir: str
    state: object               # the state directory (a pathlib.Path)
    variables: list[str]
    outputs: dict


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    """The local environment applied (this checkout's processes, 2 brokers
    per datacenter), once for the tests of this module that read it; they
    run in file order, the one that changes and destroys it last. Destroyed
    at the end, if that test did not."""
    tmp_path = tmp_path_factory.mktemp("applied")
    env_dir = local_environment(tmp_path)
    state = tmp_path / "state"
    variables = ["-var", f"python={sys.executable}",
                 "-var", f"state_dir={state}", "-var", f"base_port={free_base_port()}",
                 "-var", f"project_dir={ROOT}"]
    assert terraform(env_dir, "init", "-input=false").returncode == 0
    out = terraform(env_dir, "validate")
    assert out.returncode == 0, out.stdout + out.stderr
    try:
        out = terraform(env_dir, "apply", "-auto-approve", "-input=false", *variables)
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
        outputs = {k: v["value"] for k, v in json.loads(
            terraform(env_dir, "output", "-json").stdout).items()}
        yield Applied(env_dir, state, variables, outputs)
    finally:
        terraform(env_dir, "destroy", "-auto-approve", "-input=false", *variables)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_status_reads_what_terraform_started(applied):
    # `status --dir .tf-local` read only a lab.json at the top, where Terraform
    # writes none: it reported no processes, HAProxy's stats socket missing
    # and the mirrors not started, while all of them ran (each component's
    # lab.json is in a directory of its own, the audit's daemon.json and
    # Airflow's airflow-state.json beside them)
    out = subprocess.run([sys.executable, "-m", "infra.local", "status", "--json",
                          "--dir", str(applied.state)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    status = json.loads(out.stdout)
    topology = load_topology(str(applied.state / "topology.toml"))
    assert status["running"] is True and status["runtime"] == "processes"
    assert all(p["alive"] for p in status["processes"]), status["processes"]
    assert Counter(p["role"] for p in status["processes"]) == {
        "zookeeper": topology.zookeeper.size,
        "broker": sum(c.brokers for c in topology.clusters()),
        "haproxy": 2, "mirror": 2, "service": 1, "airflow": 4}
    for cluster in status["clusters"]:
        assert len(cluster["brokers"]) == cluster["brokers_expected"], cluster
        if cluster["kind"] == "datacenter":
            lb = cluster["load_balancer"]
            assert "error" not in lb, lb
            assert [b["status"] for b in lb["backends"]] == ["UP"] * cluster["brokers_expected"]
    (mirror,) = status["mirrors"]
    assert [(p["started"], p["alive"], p["metrics"]) for p in mirror["processes"]] == \
        [(True, True, True)] * 2
    assert set(mirror["lag"]) == {"dc-a", "dc-b"}
    assert not [lag for lag in mirror["lag"].values() if "error" in lag], mirror["lag"]
    text = subprocess.run([sys.executable, "-m", "infra.local", "status", "--dir",
                           str(applied.state)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120).stdout
    assert "DOWN" not in text and "not started" not in text and "error" not in text, text


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_local_environment_applies_changes_and_destroys(applied):
    env_dir, state, variables, outputs = (applied.env_dir, applied.state, applied.variables,
                                          applied.outputs)
    try:
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
        send_through_mirror(outputs, state, sent, analysis_brokers=2)

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
