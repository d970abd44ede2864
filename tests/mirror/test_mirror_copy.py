"""The mirror copies what it should, byte for byte, and nothing it should not
(real ZooKeeper and brokers; the mirror runs in this process)."""
from __future__ import annotations

import zlib
from collections import Counter

import pytest

from broker.client.admin import AdminClient
from broker.coordination import offsets as zk_offsets
from broker.service_kit.settings import ConfigError
from broker_helpers import wait_until
from broker.service_kit.settings import load
from mirror.config import MirrorConfig
from mirror.marks import mirrored_topics
from mirror_helpers import mirror_config, read_all, ref, values_of


@pytest.mark.parametrize("compression,source_compression,forward_bytes", [
    ("none", "none", True),         # message sets forwarded as bytes (the default)
    ("zstd", "none", True),         # ... and compressed into the target
    ("none", "gzip", True),         # compressed sources: their wrappers are decoded
    ("none", "none", False),        # the decoding path for everything
])
def test_copies_two_datacenters_byte_for_byte(clusters, cluster_producers, mirrors, compression,
                                              source_compression, forward_bytes):
    dc_a, dc_b, analysis = clusters("dc-a"), clusters("dc-b"), clusters("analysis", brokers=2)
    dc_a.create_topic("clicks", 2)
    dc_b.create_topic("clicks", 2)
    dc_b.create_topic("views", 1)
    sent = []
    for cluster, topic, n in ((dc_a, "clicks", 300), (dc_b, "clicks", 200), (dc_b, "views", 100)):
        producer = cluster_producers(cluster, compression=source_compression)
        for i in range(n):
            key = None if i % 3 else f"user-{i % 17}".encode()
            value = f"{cluster.name}/{topic}/{i}".encode() + bytes(range(256))[:i % 50]
            producer.send(topic, value, key=key, timestamp=1_700_000_000_000 + i)
            sent.append((topic, key, value, 1_700_000_000_000 + i))
        producer.flush(30)

    mirror = mirrors(mirror_config([dc_a, dc_b], analysis, target_partitions=3,
                                   compression=compression, forward_bytes=forward_bytes))
    wait_until(lambda: mirror.copied >= len(sent), 60, what="the mirror to copy everything")
    forwarded = sum(pipe.forwarded for pipe in mirror.pipes)
    if forward_bytes and source_compression == "none":
        assert forwarded == len(sent)       # not one message decoded on the way
    else:
        assert forwarded == 0

    copied = []
    for topic in ("clicks", "views"):
        for bp, messages in read_all(analysis, topic).items():
            for m in messages:
                copied.append((topic, m.key, m.value, m.timestamp))
    # key, value and timestamp byte for byte; nothing missing, nothing twice
    assert Counter(copied) == Counter(sent)
    # target topics made with the configured partitions on every target broker
    assert sorted(read_all(analysis, "clicks")) == ["0-0", "0-1", "0-2", "1-0", "1-1", "1-2"]
    # keyed messages sit where the key's hash puts them in the target
    partitions = sorted(read_all(analysis, "clicks"), key=lambda bp: tuple(map(int, bp.split("-"))))
    for bp, messages in read_all(analysis, "clicks").items():
        for m in messages:
            if m.key is not None:
                assert partitions[zlib.crc32(m.key) % len(partitions)] == bp
    if compression != "none":       # stored compressed: fewer bytes than in the sources
        assert log_bytes(analysis, "clicks") < log_bytes(dc_a, "clicks") + \
            log_bytes(dc_b, "clicks")
    # both topics are marked as copies in the target, with where they came from
    marks = mirrored_topics(analysis.zk)
    assert sorted(marks["clicks"]) == ["dc-a", "dc-b"] and marks["views"] == ["dc-b"]


def log_bytes(cluster, topic: str) -> int:
    total = 0
    for broker in cluster.brokers.values():
        with AdminClient(broker.address) as admin:
            count = admin.partition_count(topic) or 0
            total += sum(admin.latest_offset(topic, p) for p in range(count))
    return total


def test_commits_source_offsets_once_copied(clusters, cluster_producers, mirrors):
    dc_a, analysis = clusters("dc-a"), clusters("analysis")
    bps = dc_a.create_topic("events", 2)
    producer = cluster_producers(dc_a)
    for i in range(500):
        producer.send("events", b"x" * 200)
    producer.flush(30)
    mirror = mirrors(mirror_config([dc_a], analysis))
    wait_until(lambda: mirror.copied == 500, 60, what="the copy")

    def committed_ends():
        committed = zk_offsets.read_offsets(dc_a.zk, "mirror-test")
        return all(committed.get(("events", bp)) == end for bp, end in ends.items())

    with AdminClient(dc_a.brokers[0].address) as admin:
        ends = {bp: admin.latest_offset("events", int(bp.split("-")[1])) for bp in bps}
    wait_until(committed_ends, 20, what="the offsets of everything copied to be committed")


def test_whitelist_blacklist_and_copies_are_not_mirrored_back(clusters, cluster_producers,
                                                             mirrors):
    dc_a, analysis = clusters("dc-a"), clusters("analysis")
    for topic in ("app-clicks", "app-secret", "other"):
        dc_a.create_topic(topic, 1)
        producer = cluster_producers(dc_a)
        producer.send(topic, topic.encode())
        producer.flush(30)
    forward = mirrors(mirror_config([dc_a], analysis, whitelist="app-.*", blacklist=".*secret"))
    wait_until(lambda: forward.copied == 1, 30, what="app-clicks copied")
    assert values_of(analysis, "app-clicks") == [b"app-clicks"]
    assert sorted(analysis.zk.get_children("/brokers/topics")) == ["app-clicks"]

    # a topic of the analysis cluster itself, next to the copy
    analysis.create_topic("analysis-own", 1)
    cluster_producers(analysis).send("analysis-own", b"own").result(30)
    # a mirror the other way copies the analysis cluster's own topic, never the copy
    back = mirrors(mirror_config([analysis], dc_a, group="mirror-back"))
    wait_until(lambda: back.copied == 1, 30, what="analysis-own copied back")
    assert values_of(dc_a, "app-clicks") == [b"app-clicks"]       # still one: no loop
    assert values_of(dc_a, "analysis-own") == [b"own"]
    assert back.pipes[0].consumer.owned() and all(
        topic == "analysis-own" for topic, _ in back.pipes[0].consumer.owned())


def test_refuses_a_target_that_is_a_source(clusters):
    dc_a, analysis = clusters("dc-a", brokers=0), clusters("analysis", brokers=0)
    with pytest.raises(ValueError, match="loop"):
        mirror_config([dc_a, analysis], analysis)
    same_by_other_name = ref(analysis).zookeeper.replace("127.0.0.1", "localhost")
    with pytest.raises(ConfigError, match="loop"):
        load(MirrorConfig, None, {"sources": [{"name": "x", "zookeeper": same_by_other_name}],
                                  "target": {"name": "y", "zookeeper": ref(analysis).zookeeper}})
    with pytest.raises(ConfigError, match="at least one"):
        load(MirrorConfig, None, {"target": {"name": "y", "zookeeper": "127.0.0.1:1/y"}})
    with pytest.raises(ConfigError, match="whitelist"):
        load(MirrorConfig, None, {"sources": [{"name": "x", "zookeeper": "127.0.0.1:1/x"}],
                                  "target": {"name": "y", "zookeeper": "127.0.0.1:1/y"},
                                  "whitelist": "("})


def test_mirror_processes_of_one_group_share_the_partitions(clusters, cluster_producers,
                                                            mirrors):
    dc_a, analysis = clusters("dc-a", brokers=2), clusters("analysis")
    bps = dc_a.create_topic("events", 3)
    config = mirror_config([dc_a], analysis)
    first, second = mirrors(config), mirrors(config)

    def shares():
        a = {bp for _, bp in first.pipes[0].consumer.owned()}
        b = {bp for _, bp in second.pipes[0].consumer.owned()}
        return a and b and not a & b and a | b == set(bps)

    wait_until(shares, 30, what="the two mirrors to split the six partitions")
    producer = cluster_producers(dc_a)
    for i in range(3000):
        producer.send("events", f"{i}".encode())
    producer.flush(30)
    wait_until(lambda: first.copied + second.copied >= 3000, 60, what="the copy")
    assert first.copied and second.copied
    second.close()                       # the other takes over its partitions
    wait_until(lambda: {bp for _, bp in first.pipes[0].consumer.owned()} == set(bps), 30,
               what="the remaining mirror to own everything")
    for i in range(3000, 4000):
        producer.send("events", f"{i}".encode())
    producer.flush(30)
    wait_until(lambda: len(set(values_of(analysis, "events"))) == 4000, 60,
               what="everything in the target")
    assert set(values_of(analysis, "events")) == {f"{i}".encode() for i in range(4000)}
