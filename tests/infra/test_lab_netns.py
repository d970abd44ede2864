"""The lab in the netns runtime (issue 29, point 1): every process in the
network namespace of its host, each datacenter with a ZooKeeper of its own,
the mirror copying across a 40 ms link, and across a cut of that link that
the datacenter itself does not notice. Needs root: skipped, with the
reason, where namespaces cannot be made (CI runs as root)."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest

from broker.service_kit.process import wait_until
from infra.local.lab import Lab
from infra.local.network import control
from infra.local.network.plan import lab_id
from infra.local.network.runner import missing_requirements
from infra.topology import LinkSpec, NetworkSpec
from lab_helpers import processes_mentioning, small_topology, topic_values

MISSING = missing_requirements()
pytestmark = pytest.mark.skipif(bool(MISSING), reason="the netns runtime needs "
                                + ", ".join(MISSING))


def produce_from(lab: Lab, host: str, topic: str, values: list[str]) -> None:
    """Send ``values`` from ``host`` (a namespace of the lab) through its
    datacenter's load balancer, acks=flushed; fails the test on an error."""
    command = control.enter_command(lab.state_dir, host, [
        sys.executable, "-m", "broker.tools", "produce", "-b", lab.lb_address("dc-a"),
        "-t", topic, "--acks", "flushed", "--quiet"])
    done = subprocess.run(command, input="\n".join(values) + "\n", capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def netns_lab(tmp_path):
    topology = dataclasses.replace(
        small_topology(dc_brokers=2, analysis_brokers=1, mirror=True),
        network=NetworkSpec(subnet="10.84.0.0/16",
                            links=(LinkSpec(("dc-a", "analysis"), rtt_ms=40),)))
    lab = Lab(topology, str(tmp_path / "lab"), runtime="netns")
    lab.up(timeout=90, monitoring=False)
    try:
        yield lab
    finally:
        lab.down(timeout=20)


def test_the_mirror_copies_across_the_wan_and_through_a_cut(netns_lab):
    lab = netns_lab
    status = lab.status()
    addresses = {c["name"]: sorted(c["brokers"].values()) for c in status["clusters"]}
    assert addresses == {"dc-a": ["10.84.1.11:19110", "10.84.1.12:19111"],
                         "analysis": ["10.84.2.11:19210"]}, addresses
    assert {s["address"] for s in status["zookeeper"]["servers"]} == \
        {"10.84.1.10:19000", "10.84.2.10:19000"}

    first = [f"before-{i}" for i in range(2000)]
    produce_from(lab, "dc-a.client", "events", first)
    control.request(lab.state_dir, "cut", **{"from": "dc-a", "to": "analysis"})
    cut_at = time.monotonic()
    # the datacenter keeps taking writes: its ZooKeeper, brokers and load
    # balancer are all on its side of the cut
    second = [f"during-{i}" for i in range(2000)]
    produce_from(lab, "dc-a.client", "events", second)
    time.sleep(max(0.0, 3 - (time.monotonic() - cut_at)))
    copied = set(topic_values(lab, "analysis", "events", [0]))
    assert not copied & {v.encode() for v in second}
    control.request(lab.state_dir, "heal")
    expected = {v.encode() for v in first + second}
    wait_until(lambda: expected <= set(topic_values(lab, "analysis", "events", [0])), 90)
    links = {(link["from"], link["to"]): link["counters"]
             for link in control.request(lab.state_dir, "status")["links"]}
    assert links[("analysis", "dc-a")]["cut"] > 0 and links[("dc-a", "analysis")]["sent"] > 0


def test_down_leaves_no_namespace_cable_or_process(tmp_path):
    topology = dataclasses.replace(small_topology(dc_brokers=1, analysis_brokers=1),
                                   network=NetworkSpec(subnet="10.85.0.0/16"))
    state_dir = str(tmp_path / "lab")
    lab = Lab(topology, state_dir, runtime="netns")
    lab.up(timeout=90, monitoring=False)
    holders = [h["pid"] for h in control.hosts(state_dir)["hosts"].values()]
    try:
        # a datacenter's own ZooKeeper is killed and started again in its namespace
        lab.kill_zookeeper(1, cluster="dc-a")
        assert not lab.alive("dc-a.zookeeper-1") and lab.alive("analysis.zookeeper-1")
        lab.restart_zookeeper(1, cluster="dc-a")
        assert lab.status()["zookeeper"]["servers"][0]["mode"] == "standalone"
    except BaseException:
        lab.down(timeout=20)
        raise
    reopened = Lab.open(state_dir)           # as `python -m infra.local down` does
    assert reopened.runtime == "netns" and reopened.topology.network.namespaces
    reopened.down(timeout=20)
    assert not os.path.exists(f"/sys/class/net/samsa{lab_id(state_dir)}")
    assert not [pid for pid in holders if os.path.exists(f"/proc/{pid}")]
    assert processes_mentioning(state_dir) == []


def test_registries_lag_service_and_prometheus_run_in_hosts_of_their_own(tmp_path):
    # Each cluster's schema registry (Confluent's REST API) in its
    # <cluster>.registry host, the lag service in `lag`, Prometheus in
    # `prometheus`, each bound to its host's address (not this machine's
    # loopback); Prometheus scrapes every broker, the mirror, the
    # registries and the lag service at their hosts' addresses across the
    # lab's links, and finds them all up.
    import json
    import urllib.request

    from infra.local import prometheus
    topology = dataclasses.replace(
        small_topology(dc_brokers=1, analysis_brokers=1, mirror=True),
        network=NetworkSpec(subnet="10.92.0.0/16",
                            links=(LinkSpec(("dc-a", "analysis"), rtt_ms=10),)))
    state_dir = str(tmp_path / "lab")
    lab = Lab(topology, state_dir, runtime="netns")
    lab.up(timeout=90, monitoring=True)
    try:
        hosts = control.hosts(state_dir)["hosts"]
        for cluster in ("dc-a", "analysis"):
            address = hosts[f"{cluster}.registry"]["address"]
            url = lab.schema_registry_url(cluster)
            assert url == f"http://{address}:8081"
            with urllib.request.urlopen(f"{url}/config", timeout=10) as r:
                assert "compatibilityLevel" in json.load(r)
        status = lab.status()
        assert status["schema_registries"] == {
            c: f"{lab.schema_registry_url(c)}/" for c in ("dc-a", "analysis")}
        assert status["lag_service"] == f"http://{hosts['lag']['address']}:8000/"
        url = lab.prometheus_url()
        assert url == f"http://{hosts['prometheus']['address']}:9090"
        # every process in the namespace of its host
        for name, host in (("registry-dc-a", "dc-a.registry"), ("lag", "lag"),
                           ("prometheus", "prometheus")):
            assert os.readlink(f"/proc/{lab.records[name].pid}/ns/net") == \
                os.readlink(f"/proc/{hosts[host]['pid']}/ns/net"), name
        # nothing listens on this machine's loopback for them
        with pytest.raises(OSError):
            urllib.request.urlopen("http://127.0.0.1:9090/-/ready", timeout=2)

        def all_up() -> bool:
            targets = prometheus.targets(url)
            return bool(targets) and all(t["health"] == "up" for t in targets)
        assert wait_until(all_up, 60, interval=1), prometheus.targets(url)
        scraped = {t["labels"]["job"] for t in prometheus.targets(url)}
        assert {prometheus.BROKER_JOB, prometheus.MIRROR_JOB, prometheus.SCHEMA_REGISTRY_JOB,
                prometheus.LAG_JOB} <= scraped
        addresses = {t["scrapeUrl"].split("/")[2].split(":")[0]
                     for t in prometheus.targets(url)}
        assert all(a.startswith("10.92.") for a in addresses), addresses
    finally:
        lab.down(timeout=20)
    assert processes_mentioning(state_dir) == []
