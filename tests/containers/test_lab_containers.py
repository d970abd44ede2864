"""The lab and Terraform's local environment in the containers runtime
(infra/local/container_runtime.py): each process an attached ``docker run``
of the project's images, with host networking.

* ``python -m infra.local up --runtime containers``: ZooKeeper, dc-a's two
  brokers behind HAProxy, the analysis broker and a mirror, each a container
  of the right image, run as the caller, on the host's network; what is
  produced through the load balancer (acks=flushed) is all copied into
  analysis; a mirror whose docker client was SIGKILLed leaves its container
  running, and ``down`` removes it with the rest: no container is left;
* the same lab secured: the containers take the secrets from the mounted
  state directory;
* a start refused when an image is missing, nothing started;
* ``terraform apply -var runtime=containers`` of the local environment (no
  Airflow, for time: its containers are test_airflow_containers.py's) makes
  every component's container, the audit service's included, each healthy by its
  image's own check; messages go through the output load balancer
  into analysis; ``destroy`` leaves no container and no process.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import sys
import urllib.request

import docker
import pytest

from broker.client.producer import Producer
from broker.harness.zookeeper import server_mode
from broker.service_kit.process import proc_stat
from broker_helpers import run_module, topic_values, wait_until
from container_helpers import health
from infra.local import container_runtime, daemon
from infra.local.container_runtime import STATE_LABEL
from infra.local.demo import count_in
from infra.local.lab import Lab, LabError, free_topology
from infra.local.lab_security import PRODUCER
from infra.topology import (ClusterSpec, LoadBalancerSpec, MirrorSpec, SecuritySpec, Topology,
                            to_toml)
from terraform_helpers import (ROOT, free_base_port, local_environment, send_through_mirror,
                               terraform)

# brokers that flush often (acks=flushed answers fast)
BROKERS = ("log.flush_ms=10",)
USER = f"{os.getuid()}:{os.getgid()}"


def topology() -> Topology:
    return Topology(
        name="test-lab-containers",
        datacenters=(ClusterSpec("dc-a", brokers=2, broker_settings=BROKERS,
                                 load_balancer=LoadBalancerSpec()),),
        analysis=ClusterSpec("analysis", brokers=1, broker_settings=BROKERS),
        mirrors=(MirrorSpec("to-analysis", sources=("dc-a",), target="analysis", processes=1,
                            settings=("commit_interval_ms=200", "linger_ms=5")),))


def containers_of(state_dir, prefix: bool = False) -> dict[str, object]:
    """The containers (running or not) labelled with ``state_dir`` (with
    ``prefix``: with any state directory under it), by name."""
    client = docker.from_env()
    try:
        if not prefix:
            found = client.containers.list(
                all=True, filters={"label": f"{STATE_LABEL}={os.path.abspath(state_dir)}"})
        else:
            found = [c for c in client.containers.list(all=True, filters={"label": STATE_LABEL})
                     if c.labels[STATE_LABEL].startswith(str(state_dir) + os.sep)]
        return {c.name: c for c in found}
    finally:
        client.close()


def running(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat.state not in "ZX"


def _lab(*args: str) -> tuple[int, str, str]:
    done = run_module("infra.local", *args, timeout=120)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.mark.timeout(180)
def test_the_lab_runs_as_containers_and_down_leaves_none(docker_host, tmp_path):
    t = free_topology(topology())
    topology_file = tmp_path / "topology.toml"
    topology_file.write_text(to_toml(t))
    state = tmp_path / "lab"
    try:
        code, out, err = _lab("up", "--runtime", "containers", "--topology", str(topology_file),
                              "--dir", str(state))
        assert code == 0, err[-3000:]
        assert "(as containers)" in out and "brokers registered 2/2" in out

        lab = Lab.open(str(state))
        assert lab.runtime == "containers"
        images = {"zookeeper": "samsa/zookeeper:latest", "broker": "samsa/samsa:latest",
                  "haproxy": "samsa/haproxy:latest", "mirror": "samsa/samsa:latest"}
        ours = containers_of(state)
        assert sorted(ours) == sorted(lab.container(name) for name in lab.records)
        for name, record in lab.records.items():
            # `up` has exited: its docker clients run on, and with them the containers
            assert running(record.pid), name
            container = ours[record.container]
            assert container.status == "running", name
            assert container.attrs["Config"]["Image"] == images[record.role], name
            assert container.attrs["HostConfig"]["NetworkMode"] == "host", name
            assert container.attrs["Config"]["User"] == USER, name

        code, out, err = _lab("status", "--dir", str(state), "--json")
        assert code == 0, err
        status = json.loads(out)
        assert status["runtime"] == "containers" and status["running"]
        assert all(p["alive"] and p["client_alive"] and p["container_state"].startswith("running")
                   for p in status["processes"]), status["processes"]
        broker_0 = lab.container("dc-a.broker-0")                 # and one it does not have
        states = container_runtime.Docker(docker_host).states([broker_0, "samsa-no-such"])
        assert states[broker_0].startswith("running") and states["samsa-no-such"] == "missing"
        (dc_a,) = [c for c in status["clusters"] if c["name"] == "dc-a"]
        assert [(b["server"], b["status"]) for b in dc_a["load_balancer"]["backends"]] == [
            ("broker-0", "UP"), ("broker-1", "UP")]       # the stats socket, from the host

        sent = {b"view %d" % i for i in range(300)}
        with Producer(bootstrap=lab.lb_address("dc-a"), acks="flushed") as producer:
            for value in sorted(sent):
                producer.send("page-views", value)
        wait_until(lambda: sent <= set(topic_values(lab, "analysis", "page-views", range(1))),
                   timeout=30, interval=0.2, what="the mirror to copy everything into analysis")
        # every one reached dc-a (through HAProxy, to both brokers) exactly once
        assert sorted(topic_values(lab, "dc-a", "page-views", range(2))) == sorted(sent)

        # kill -9 of a broker (through the engine) and its restart: a container
        # of the same name, the same data, registered anew; nothing lost
        lab.kill_broker("dc-a", 1, signal.SIGKILL)
        old_pid = lab.records["dc-a.broker-1"].pid
        lab.restart_broker("dc-a", 1)
        assert lab.records["dc-a.broker-1"].pid != old_pid
        assert containers_of(state)[lab.records["dc-a.broker-1"].container].status == "running"
        assert sorted(topic_values(lab, "dc-a", "page-views", range(2))) == sorted(sent)

        # SIGKILL cannot be forwarded: the mirror's container outlives its client
        mirror = lab.records["to-analysis.mirror-0"]
        os.kill(mirror.pid, signal.SIGKILL)
        wait_until(lambda: not running(mirror.pid), timeout=10, what="the docker client to die")
        assert containers_of(state)[mirror.container].status == "running"
        # status tells it as it is: the mirror serves, its client is gone (it
        # said DOWN, for a container that went on copying)
        code, out, err = _lab("status", "--dir", str(state), "--json")
        assert code == 0, err
        status = json.loads(out)
        (seen,) = [p for p in status["processes"] if p["name"] == mirror.name]
        assert (seen["alive"], seen["client_alive"]) == (True, False), seen
        assert seen["container_state"].startswith("running"), seen
        (in_mirror,) = status["mirrors"][0]["processes"]     # its lag still scraped
        assert (in_mirror["alive"], in_mirror["metrics"]) == (True, True), in_mirror
        code, out, err = _lab("status", "--dir", str(state))
        assert "its docker client is gone: `down` removes it" in out, out

        pids = lab.pids()
        code, out, err = _lab("down", "--dir", str(state))
        assert code == 0, err[-3000:]
        assert "removed containers whose docker client had gone" in err
        assert containers_of(state) == {}
        assert not [name for name, pid in pids.items() if running(pid)]
        assert (state / "logs" / "dc-a.broker-0.log").stat().st_size > 0    # logs are kept
    finally:
        if (state / "lab.json").exists():
            Lab.open(str(state)).down(timeout=10)


@pytest.mark.timeout(180)
def test_a_secured_lab_runs_as_containers_with_its_mounted_secrets(docker_host, tmp_path):
    """The secured lab's certificates, passwords and ZooKeeper identities are
    files of its state directory, which every container mounts at the same
    path: the brokers serve TLS and SCRAM, the mirror reads and writes as its
    user; a producer without credentials gets nothing in."""
    t = dataclasses.replace(free_topology(topology()), security=SecuritySpec(enabled=True))
    topology_file = tmp_path / "topology.toml"
    topology_file.write_text(to_toml(t))
    state = tmp_path / "lab"
    try:
        code, out, err = _lab("up", "--runtime", "containers", "--topology", str(topology_file),
                              "--dir", str(state), "--no-monitoring")
        assert code == 0, err[-3000:]
        assert "(as containers)" in out and "secured: TLS listeners" in out
        lab = Lab.open(str(state))
        security = lab.security
        # ZooKeeper's container serves TLS alone on its client port, and its
        # own health check asks there over TLS
        port = lab.records["zookeeper-1"].ports["client"]
        assert server_mode(lab.topology.host, port) is None
        assert server_mode(lab.topology.host, port,
                           tls=lab.zookeeper_probe_context()) == "standalone"
        zookeeper = containers_of(state)[lab.container("zookeeper-1")]
        wait_until(lambda: health(zookeeper) == "healthy", 30, interval=0.5,
                   what="the ZooKeeper container's health check over TLS")
        with Producer(bootstrap=lab.lb_address("dc-a"), acks="flushed", retries=0) as stranger:
            stranger.send("page-views", b"a stranger's view")
            stranger.flush(30)
            assert stranger.failed_batches == 1
        with Producer(bootstrap=lab.lb_address("dc-a"), acks="flushed", partitioner="any",
                      **security.client_settings(PRODUCER)) as producer:
            for i in range(100):
                producer.send("page-views", b"view %d" % i, key=None)
            producer.flush(60)
            assert producer.failed_batches == 0
        wait_until(lambda: count_in(lab.broker_addresses("analysis"), "page-views",
                                    security) >= 100,
                   timeout=60, interval=0.5, what="the mirror to copy everything into analysis")
    finally:
        if (state / "lab.json").exists():
            Lab.open(str(state)).down()
    assert containers_of(state) == {}


def test_a_missing_image_refuses_the_start(docker_host, tmp_path, monkeypatch):
    monkeypatch.setitem(container_runtime.IMAGES, "haproxy", "samsa/haproxy:no-such-tag")
    lab = Lab(free_topology(topology()), str(tmp_path / "lab"), runtime="containers")
    with pytest.raises(LabError, match=r"samsa/haproxy:no-such-tag.*make images"):
        lab.up()
    assert not lab.records
    assert containers_of(tmp_path / "lab") == {}


@pytest.mark.timeout(300)
def test_terraform_applies_and_destroys_the_environment_as_containers(docker_host, tmp_path):
    env_dir = local_environment(tmp_path)
    state = tmp_path / "state"
    variables = ["-var", f"python={sys.executable}", "-var", f"state_dir={state}",
                 "-var", f"base_port={free_base_port()}", "-var", f"project_dir={ROOT}",
                 "-var", "runtime=containers", "-var", "airflow=false",
                 "-var", 'datacenters=["dc-a"]', "-var", "analysis_brokers=1",
                 # one replica per partition: the analysis cluster has one broker
                 "-var", "replication_factor=1", "-var", "mirror_processes=1"]
    out = terraform(env_dir, "init", "-input=false")
    assert out.returncode == 0, out.stdout + out.stderr
    pids: list[int] = []
    try:
        out = terraform(env_dir, "apply", "-auto-approve", "-input=false", *variables)
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
        outputs = {k: v["value"] for k, v in json.loads(
            terraform(env_dir, "output", "-json").stdout).items()}
        assert outputs["runtime"] == "containers"

        ours = containers_of(state, prefix=True)
        # <lab>-<8 hex digits of its state directory>-<component>
        by_component = {re.sub(r"^.*?-[0-9a-f]{8}-", "", name): c for name, c in ours.items()}
        assert sorted(by_component) == ["analysis.broker-0", "audit", "dc-a.broker-0",
                                        "dc-a.broker-1", "dc-a.haproxy", "to-analysis.mirror-0",
                                        "zookeeper-1"], sorted(ours)
        assert all(c.status == "running" for c in ours.values())
        assert by_component["audit"].attrs["Config"]["Image"] == "samsa/samsa:latest"
        # each healthy by its image's own HEALTHCHECK: the audit's probes its
        # /healthz (the image's default, a broker's metrics port, never answered)
        def unhealthy() -> dict[str, str | None]:
            return {name: status for name, c in ours.items()
                    if (status := health(c)) != "healthy"}
        wait_until(lambda: not unhealthy(), 60, interval=0.5,     # checks run every 2 s
                   what=lambda: f"every container healthy; not: {unhealthy()}")
        with urllib.request.urlopen(outputs["audit_url"] + "/healthz", timeout=10) as r:
            assert r.read() == b"ok\n"

        send_through_mirror(outputs, state, {b"tf %d" % i for i in range(100)},
                            analysis_brokers=1)
        # the docker clients the components' up commands left running
        pids += [pid for component in ("zookeeper", "dc-a", "analysis", "mirror")
                 for pid in Lab.open(str(state / component)).pids().values()]
        _fields, audit_records = daemon.read(str(state / "audit"))
        pids += [record.pid for record in audit_records]
        assert all(running(pid) for pid in pids)
    finally:
        out = terraform(env_dir, "destroy", "-auto-approve", "-input=false", *variables)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert containers_of(state, prefix=True) == {}
    assert not [pid for pid in pids if running(pid)]
