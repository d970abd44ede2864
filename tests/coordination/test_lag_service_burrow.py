"""The lag service answers in Burrow's shape (issue 27, point 2): against a
real cluster (three brokers, ZooKeeper) with a group that committed every
partition, each of its answers has every key of Burrow's documented example
(tests/coordination/burrow_v3_examples.json) at the same nesting with the
same JSON type, Burrow's messages and HTTP codes, and values that agree
with each other (current_lag, totallag, maxlag, partition numbers)."""
from __future__ import annotations

import json
import pathlib
import socket
import urllib.request

from broker.coordination import offsets as zk_offsets
from broker.coordination import paths
from broker.coordination.named_cluster import NamedCluster
from broker.lag.config import LagServiceConfig
from broker.lag.service import LagService
from broker_helpers import get_json

EXAMPLES = json.loads((pathlib.Path(__file__).parent / "burrow_v3_examples.json").read_text())
BURROW_STATUSES = {"NOTFOUND", "OK", "WARN", "ERR", "STOP", "STALL", "REWIND"}


def json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(value)]


def differences(example, real, where: str = "$") -> list[str]:
    """Where ``real`` lacks a key of ``example`` or has another JSON type
    (list items each against the example's first); extra keys are fine."""
    if json_type(example) != json_type(real):
        return [f"{where}: {json_type(real)}, Burrow's is {json_type(example)}"]
    found = []
    if isinstance(example, dict):
        for key, value in example.items():
            found += [f"{where}.{key}: missing"] if key not in real else \
                differences(value, real[key], f"{where}.{key}")
    elif isinstance(example, list) and example:
        for i, item in enumerate(real):
            found += differences(example[0], item, f"{where}[{i}]")
    return found


def test_the_shape_checker_finds_what_differs():
    example = EXAMPLES["consumer_status"]
    assert differences(example, json.loads(json.dumps(example))) == []
    broken = json.loads(json.dumps(example))
    del broken["status"]["maxlag"]["end"]["observedAt"]
    broken["status"]["partitions"][0]["partition"] = "0-0"
    broken["status"]["totallag"] = None
    assert sorted(differences(example, broken)) == [
        "$.status.maxlag.end.observedAt: missing",
        "$.status.partitions[0].partition: string, Burrow's is number",
        "$.status.totallag: null, Burrow's is number"]


def test_every_answer_has_burrows_keys_and_types(shared_cluster, cluster_producers, topic):
    partitions = shared_cluster.create_topic(topic, 2)                       # 6
    zk, connect, group = shared_cluster.zk, shared_cluster.connect, "burrow-shaped"
    producer = cluster_producers(connect, acks="flushed")
    for i in range(120):
        producer.send(topic, b"v%03d" % i, key=b"k%d" % i)
    producer.flush(timeout=30)
    zk_offsets.commit_offsets(zk, group, {(topic, bp): 0 for bp in partitions})
    # an owner that is no member of the group: /status lists its partition
    zk.create(paths.owners_path(group, topic, partitions[-1]), b"ghost", makepath=True)

    service = LagService(LagServiceConfig(clusters=(NamedCluster("dc", connect),),
                                          http_port=0, interval_s=3600)).start()
    base = f"http://127.0.0.1:{service.port}"
    host = socket.gethostname()
    try:
        assert service.wait_ready(30)
        answers = {}
        for name, path, code, example in (
                ("clusters", "/v3/kafka", 200, "cluster_list"),
                ("consumers", "/v3/kafka/dc/consumer", 200, "consumer_list"),
                ("lag", f"/v3/kafka/dc/consumer/{group}/lag", 200, "consumer_status"),
                ("status", f"/v3/kafka/dc/consumer/{group}/status", 200, "consumer_status"),
                ("no cluster", "/v3/kafka/nowhere/consumer", 404, "error")):
            status, body = get_json(base + path)
            assert status == code, (path, status, body)
            assert differences(EXAMPLES[example], body) == [], path
            assert body["message"] == EXAMPLES[example]["message"], path
            assert body["request"] == {"url": path, "host": host}, path
            answers[name] = body
        assert answers["clusters"]["clusters"] == ["dc"]
        assert group in answers["consumers"]["consumers"]

        lag = answers["lag"]["status"]
        assert (lag["cluster"], lag["group"], lag["partition_count"]) == ("dc", group, 6)
        parts = lag["partitions"]
        assert sorted(p["broker_partition"] for p in parts) == sorted(partitions)
        assert sorted(p["partition"] for p in parts) == list(range(6))     # one topic
        for p in parts:
            assert p["status"] in BURROW_STATUSES and p["committed"] == 0
            assert p["current_lag"] == p["lag_bytes"] == p["log_end"] > 0
            assert p["start"] == p["end"] and p["end"]["offset"] == 0   # one commit seen
            assert p["end"]["lag"] == p["current_lag"]
            assert p["end"]["timestamp"] <= p["end"]["observedAt"]
            assert p["complete"] == 0.1                                  # 1 of 10 commits
        assert lag["totallag"] == sum(p["current_lag"] for p in parts)
        assert lag["maxlag"]["current_lag"] == max(p["current_lag"] for p in parts)
        assert lag["status"] in ("OK", "WARN", "ERR") and lag["complete"] == 0.0
        assert [(p["broker_partition"], p["owner"], p["client_id"], p["owner_alive"])
                for p in answers["status"]["status"]["partitions"]] == \
            [(partitions[-1], "ghost", "ghost", False)]

        # a group nobody evaluated: Burrow's NOTFOUND, with 404
        for path in ("/v3/kafka/dc/consumer/nobody/status", "/v3/kafka/nowhere/consumer/x/lag"):
            status, body = get_json(base + path)
            assert status == 404 and body["error"] is False, (path, body)
            assert body["status"]["status"] == "NOTFOUND"
            assert set(body["status"]) == set(EXAMPLES["consumer_status"]["status"])
        with urllib.request.urlopen(f"{base}/burrow/admin", timeout=10) as r:
            assert (r.status, r.read()) == (200, b"GOOD")
    finally:
        service.stop()
