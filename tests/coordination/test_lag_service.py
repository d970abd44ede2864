"""The lag service (python -m broker.lag) and `groups --status` against a
real cluster: a group whose only member, a process of its own, is killed -9
while behind shows STOP on the HTTP endpoint, in the Prometheus gauges and in
the console tool within the threshold; every partition stays in view, its
owner shown (still registered until its session expires, then gone); bad
settings get a clear error; config/lag.toml holds every setting's default."""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from broker.coordination import offsets as zk_offsets
from broker.lag.config import LagServiceConfig
from broker.service_kit import settings
from broker_helpers import (get_json, metric, run_module, scrape_metrics, unused_port,
                            wait_until)

ROOT = pathlib.Path(__file__).resolve().parents[2]

CONSUMER = r"""
import sys, time
from broker.client.group_consumer import GroupConsumer
c = GroupConsumer(zookeeper=sys.argv[1], group=sys.argv[2], topics=(sys.argv[3],),
                  consumer_id="victim", auto_commit_interval_ms=100, queue_chunks=1,
                  fetch_max_bytes=200)
print("started", flush=True)
for m in c.messages():
    time.sleep(0.05)          # slower than the producer: behind, committing
"""


def test_a_killed_member_shows_stop(shared_cluster, cluster_producers, topic, tmp_path):
    partitions = shared_cluster.create_topic(topic, 1)                     # 3
    zk, connect, group = shared_cluster.zk, shared_cluster.connect, "lag-victim"
    producer = cluster_producers(connect, acks="flushed")
    for i in range(3000):
        producer.send(topic, b"x" * 100, key=b"k%d" % i)
    producer.flush(timeout=30)

    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    victim = subprocess.Popen([sys.executable, "-c", CONSUMER, connect, group, topic],
                              stdout=subprocess.PIPE, env=env)
    port = unused_port()
    service = subprocess.Popen([sys.executable, "-m", "broker.lag", "--cluster",
                                f"dc={connect}", "--http-port", str(port), "--interval", "0.5",
                                "--set", "stop_min_ms=3000"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        assert victim.stdout.readline().strip() == b"started"
        wait_until(lambda: len(zk_offsets.read_offsets(zk, group)) == len(partitions), 30,
                   what="the victim to commit every partition")
        wait_until(lambda: get_json(f"{base}/healthz")[0] == 200, 30, interval=0.2,
                   what="the lag service's first evaluation")
        # an evaluation after the commits (the first may have run before them)
        def evaluated_after_the_commits() -> bool:
            parts = get_json(f"{base}/v3/kafka/dc/consumer/{group}/lag")[1] \
                .get("status", {}).get("partitions", [])
            return len(parts) == 3 and all(p["committed"] is not None for p in parts)
        wait_until(evaluated_after_the_commits, 10, interval=0.2,
                   what="an evaluation of the group's three committed partitions")
        code, body = get_json(f"{base}/v3/kafka/dc/consumer/{group}/lag")
        assert code == 200
        status = body["status"]
        assert status["status"] in ("OK", "WARN") and status["partition_count"] == 3
        assert all(p["owner"] == "victim" and p["owner_alive"] for p in status["partitions"]), \
            status["partitions"]

        victim.kill()                                   # kill -9: no goodbye, no commit
        victim.wait()
        killed = time.monotonic()
        def all_stopped() -> bool:
            parts = get_json(f"{base}/v3/kafka/dc/consumer/{group}/lag")[1]["status"][
                "partitions"]
            return all(p["status"] == "STOP" for p in parts if p["lag_bytes"])
        # every partition behind: its last commit was at most at the kill
        wait_until(all_stopped, 20, interval=0.2, what="STOP after the kill")
        took = time.monotonic() - killed
        assert took <= 3.0 + 2 * 0.5 + 1.0, took    # the threshold, two cycles, slack
        code, body = get_json(f"{base}/v3/kafka/dc/consumer/{group}/status")
        status = body["status"]
        assert status["status"] == "ERR" and status["worst_status"] == "STOP"   # Burrow folds
        assert status["maxlag"]["status"] == "STOP" and status["maxlag"]["lag_bytes"] > 0
        assert status["maxlag"]["lag_seconds"] > 0
        assert status["totallag"] > 0

        samples = scrape_metrics(port)
        assert metric(samples, "samsa_group_status", cluster="dc", group=group) == 3
        assert metric(samples, "samsa_group_lag_bytes", cluster="dc", group=group) \
            == status["totallag"]
        bp = status["maxlag"]["broker_partition"]
        assert metric(samples, "samsa_partition_lag_bytes", cluster="dc", group=group,
                      topic=topic, partition=bp) == status["maxlag"]["lag_bytes"]

        # the console tool says the same
        done = run_module("broker.tools", "groups", "--zookeeper", connect, "--status", group,
                          "--stop-after", "3")
        out = done.stdout.decode()
        assert done.returncode == 0, done.stderr
        assert out.startswith(f"GROUP {group}  STATUS STOP")
        rows = [line.split("\t") for line in out.splitlines()[2:]]
        assert len(rows) == 3 and {r[1] for r in rows} == set(partitions)
        done = run_module("broker.tools", "groups", "--cluster", f"dc={connect}", "--status",
                          "--all", "--json", "--stop-after", "3")
        shown = json.loads(done.stdout)[group]           # Burrow's status object
        assert (shown["cluster"], shown["status"], shown["worst_status"]) == \
            ("dc", "ERR", "STOP")
        assert shown["partition_count"] == len(shown["partitions"]) == 3
        # for checks: exit 3 at the level or worse, the report printed all the same
        for level, status in (("WARN", 3), ("STOP", 3), ("REWIND", 0)):
            done = run_module("broker.tools", "groups", "--zookeeper", connect, "--status",
                              group, "--stop-after", "3", "--fail-on", level)
            assert done.returncode == status, (level, done.stderr)
            assert done.stdout.decode().startswith(f"GROUP {group}  STATUS STOP")
        done = run_module("broker.tools", "groups", "--zookeeper", connect, "--status",
                          "--all", "--json", "--stop-after", "3", "--fail-on", "STOP")
        assert done.returncode == 3
        assert json.loads(done.stdout)[group]["worst_status"] == "STOP"

        # unknown names answer 404
        assert get_json(f"{base}/v3/kafka/nope/consumer")[0] == 404
        code, body = get_json(f"{base}/v3/kafka/dc/consumer/nope/status")
        assert code == 404 and body["status"]["status"] == "NOTFOUND"
        assert group in get_json(f"{base}/v3/kafka/dc/consumer")[1]["consumers"]
    finally:
        if victim.poll() is None:
            victim.kill()
        service.send_signal(signal.SIGTERM)
        service.wait(timeout=20)
    assert service.returncode == 0, service.stdout.read().decode()[-3000:]


def test_bad_settings_are_refused():
    done = run_module("broker.lag", "--interval", "1")
    assert done.returncode == 2 and b"at least one cluster" in done.stderr
    done = run_module("broker.lag", "--print-config", "--cluster", "a=127.0.0.1:2181/a",
                      "--set", "interval_s=0")
    assert done.returncode == 2 and b"interval_s" in done.stderr
    done = run_module("broker.lag", "--cluster", "no-equals-sign")
    assert done.returncode == 2 and b"NAME=ZOOKEEPER" in done.stderr
    done = run_module("broker.lag", "--cluster", "a=127.0.0.1:2181/a", "--set", "groups=(")
    assert done.returncode == 2



def test_the_documented_file_lists_every_setting_with_its_default():
    """config/lag.toml, as the other services' files are held: every field
    of the settings dataclass is in it, each with the code's default."""
    path = str(ROOT / "config" / "lag.toml")
    assert set(settings.read_toml(path)) == {f.name for f in dataclasses.fields(LagServiceConfig)}
    documented = settings.load(LagServiceConfig, path)
    assert documented == LagServiceConfig(clusters=documented.clusters)
    assert [(c.name, c.zookeeper) for c in documented.clusters] == \
        [("dc-a", "127.0.0.1:2181/dc-a"), ("analysis", "127.0.0.1:2181/analysis")]
