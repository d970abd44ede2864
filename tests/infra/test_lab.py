"""The lab with real ZooKeeper, brokers, HAProxy and mirror processes: up,
status and down from the command line (the processes outlive ``up``; up
also starts the lab's lag service and Prometheus), a
failed start that takes down what it started, refused starts, and a lab
whose mirror copies a datacenter into the analysis cluster."""
from __future__ import annotations

import json
import urllib.request
import os
import socket

import pytest

from broker.client.admin import AdminClient
from broker.client.producer import Producer
from broker_helpers import connect, read_partition, run_module, scrape_metrics, wait_until
from infra.local.lab import Lab, LabError, free_topology
from infra.topology import to_toml
from lab_helpers import processes_mentioning, running, small_topology


def _lab(*args: str) -> tuple[int, str, str]:
    done = run_module("infra.local", *args, timeout=120)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_lab_up_status_down_from_the_command_line(tmp_path):
    topology = free_topology(small_topology(dc_brokers=2, analysis_brokers=1))
    topology_file = tmp_path / "topology.toml"
    topology_file.write_text(to_toml(topology))
    state = tmp_path / "lab"
    try:
        code, out, err = _lab("up", "--topology", str(topology_file), "--dir", str(state))
        assert code == 0, err
        assert "brokers registered 2/2" in out

        processes = json.loads((state / "lab.json").read_text())["processes"]
        assert sorted(p["name"] for p in processes) == [
            "analysis.broker-0", "dc-a.broker-0", "dc-a.broker-1", "dc-a.haproxy", "lag",
            "prometheus", "registry-analysis", "registry-dc-a", "zookeeper-1"]
        pids = {p["name"]: p["pid"] for p in processes}
        # `up` has exited: its processes run on, in sessions of their own
        assert all(running(pid) for pid in pids.values())
        assert all(os.getpgid(pid) == pid for pid in pids.values())

        lb = f"{topology.host}:{topology.lb_port('dc-a')}"
        with Producer(bootstrap=lb, acks="flushed") as producer:
            for i in range(10):
                producer.send("clicks", b"click %d" % i)

        code, out, err = _lab("status", "--dir", str(state), "--json")
        assert code == 0, err
        status = json.loads(out)
        assert status["running"]
        assert {p["name"]: p["pid"] for p in status["processes"]} == pids
        clusters = {c["name"]: c for c in status["clusters"]}
        assert clusters["dc-a"]["brokers"] == {
            str(i): f"{topology.host}:{port}" for i, port in enumerate(topology.broker_ports("dc-a"))}
        assert clusters["analysis"]["brokers"] == {
            "0": f"{topology.host}:{topology.broker_ports('analysis')[0]}"}
        assert "clicks" in clusters["dc-a"]["topics"]
        assert clusters["analysis"]["load_balancer"] is None
        backends = clusters["dc-a"]["load_balancer"]["backends"]
        assert [(b["server"], b["status"]) for b in backends] == [
            ("broker-0", "UP"), ("broker-1", "UP")]
        assert status["zookeeper"]["servers"][0]["mode"] == "standalone"
        web = {p["name"]: p["ports"] for p in processes}["prometheus"]["web"]
        assert status["prometheus"]["url"] == f"http://{topology.host}:{web}"
        registries = {p["name"]: p["ports"]["http"] for p in processes
                      if p["name"].startswith("registry-")}
        assert status["schema_registries"] == {
            c: f"http://{topology.host}:{registries['registry-' + c]}/"
            for c in ("dc-a", "analysis")}
        with urllib.request.urlopen(status["schema_registries"]["dc-a"] + "subjects",
                                    timeout=10) as r:
            assert isinstance(json.load(r), list)        # Confluent's API answers
        # 3 brokers, the 2 clusters' schema registries and the lag service
        assert status["prometheus"]["targets"] == 6
        assert status["lag_service"].startswith(f"http://{topology.host}:")

        code, out, err = _lab("status", "--dir", str(state))
        assert code == 0 and "load balancer" in out and "UP" in out, out + err

        code, out, err = _lab("up", "--topology", str(topology_file), "--dir", str(state))
        assert code == 1 and "already running" in err, err

        code, out, err = _lab("down", "--dir", str(state))
        assert code == 0, err
        assert not [name for name, pid in pids.items() if running(pid)]
        assert processes_mentioning(str(state)) == []
        assert not (state / "lab.json").exists()
        assert (state / "logs" / "dc-a.broker-0.log").stat().st_size > 0    # logs are kept

        code, out, err = _lab("status", "--dir", str(state))
        assert code == 1 and "NOT (fully) running" in out
    finally:
        if (state / "lab.json").exists():
            Lab.open(str(state)).down()


def test_a_failed_start_takes_down_what_it_started(make_lab):
    lab = make_lab(small_topology(dc_brokers=2, analysis_brokers=0))
    # a regular file where broker 1 keeps its data: that broker exits at start
    bad = lab.broker_data_dir("dc-a", 1)
    os.makedirs(os.path.dirname(bad))
    with open(bad, "w") as f:
        f.write("not a directory\n")
    with pytest.raises(LabError) as info:
        lab.up(timeout=30)
    message = str(info.value)
    assert "dc-a.broker-1 exited with status 1 before it was ready" in message
    assert "File exists" in message            # the tail of its log says why
    assert processes_mentioning(lab.state_dir) == []
    assert not os.path.exists(lab.path("lab.json"))


def test_up_refuses_ports_in_use_and_starts_nothing(make_lab):
    lab = make_lab(small_topology(analysis_brokers=0))
    port = lab.topology.lb_port("dc-a")
    with socket.socket() as squatter:
        squatter.bind((lab.topology.host, port))
        squatter.listen()
        with pytest.raises(LabError, match=rf"{port} \(dc-a load balancer\)"):
            lab.up()
    assert not lab.records
    assert processes_mentioning(lab.state_dir) == []


def test_lab_with_mirror(make_lab):
    """The mirror process runs, answers on /metrics, and copies what the
    datacenter's producers send through the load balancer into the analysis
    cluster; the status's lag (from committed offsets) falls to 0."""
    lab = make_lab(small_topology(dc_brokers=2, analysis_brokers=1, mirror=True)).up()
    (mirror,) = [name for name, r in lab.records.items() if r.role == "mirror"]
    assert lab.alive(mirror)
    metrics_port = lab.records[mirror].ports["metrics"]
    scrape_metrics(metrics_port)            # answers, in Prometheus' format

    sent = {b"view %d" % i for i in range(300)}
    with Producer(bootstrap=lab.lb_address("dc-a"), acks="flushed") as producer:
        for value in sorted(sent):
            producer.send("page-views", value)

    def caught_up():
        lag = lab.status()["mirrors"][0]["lag"]["dc-a"]
        return lag if (lag["partitions"] and lag["lag_bytes"] == 0 and not lag["uncommitted"]
                       and not lag["errors"]) else None

    wait_until(caught_up, timeout=30, interval=0.2, what="the mirror's lag to reach 0")

    copied = []
    address = lab.broker_address("analysis", 0)
    with AdminClient(address) as admin:
        partitions = admin.partition_count("page-views")
    conn = connect(address)
    try:
        for p in range(partitions):
            copied += [m.value for m in read_partition(conn, "page-views", p)]
    finally:
        conn.close()
    assert set(copied) == sent         # at-least-once: every one, maybe some twice
    copied_total = sum(v for (name, _labels), v in scrape_metrics(metrics_port).items()
                       if name == "samsa_mirror_messages_total")
    assert copied_total >= len(sent)

    pids = lab.pids()
    lab.down()
    assert not [name for name, pid in pids.items() if running(pid)]
    assert processes_mentioning(lab.state_dir) == []
