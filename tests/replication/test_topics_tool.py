"""`topics --describe --cluster`, `--under-replicated` and `--unavailable`
(issue 28, point 6): what an operator reads of the replicated partitions."""
from __future__ import annotations

import json

from broker_helpers import run_module, wait_until
from replication_helpers import REPLICATED, create_replicated, leader_of, wait_in_sync


def topics(cluster, *args: str) -> tuple[int, str, str]:
    out = run_module("broker.tools", "topics", "--zookeeper", cluster.connect, *args)
    return out.returncode, out.stdout.decode(), out.stderr.decode()


def test_describe_lists_leader_replicas_and_in_sync_set(clusters):
    cluster = clusters("tool", brokers=2, settings=REPLICATED)
    create_replicated(cluster, "t", partitions=2, replication_factor=2)
    for p in range(2):
        wait_in_sync(cluster, "t", p, {0, 1})
    code, out, err = topics(cluster, "--describe", "t")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2
    for p, line in enumerate(lines):
        leader = leader_of(cluster, "t", p)
        assert line.startswith(f"Topic: t\tPartition: {p}\tLeader: {leader}\t")
        assert "Isr: " in line and "Epoch: 0" in line
    code, out, _ = topics(cluster, "--describe", "--json")
    rows = json.loads(out)["partitions"]
    assert [(r["topic"], r["partition"]) for r in rows] == [("t", 0), ("t", 1)]
    assert all(sorted(r["isr"]) == [0, 1] and not r["under_replicated"] for r in rows)
    code, out, err = topics(cluster, "--describe", "nope")
    assert code == 1 and "no replicated topic 'nope'" in err
    # nothing is under-replicated yet; then a broker goes
    assert topics(cluster, "--under-replicated")[1] == ""
    cluster.brokers.pop(1).kill()
    for p in range(2):
        wait_in_sync(cluster, "t", p, {0})
    code, out, _ = topics(cluster, "--under-replicated")
    assert code == 0 and len(out.splitlines()) == 2 and "Isr: 0\t" in out
    assert topics(cluster, "--unavailable")[1] == ""


def test_unavailable_lists_partitions_without_a_live_leader(clusters):
    cluster = clusters("tool-offline", brokers=2, settings=REPLICATED)
    create_replicated(cluster, "solo", replication_factor=1)
    leader = leader_of(cluster, "solo", 0)
    cluster.brokers.pop(leader).kill()
    def listed():
        code, out, _ = topics(cluster, "--unavailable", "--json")
        rows = json.loads(out)["partitions"]
        return rows if rows and rows[0]["unavailable"] else None
    rows = wait_until(listed, 30, interval=0.2, what="the partition to be unavailable")
    assert rows[0]["topic"] == "solo" and rows[0]["replicas"] == [leader]


def test_needs_the_cluster():
    out = run_module("broker.tools", "topics", "--under-replicated")
    assert out.returncode == 2 and b"need the cluster" in out.stderr
