"""`python -m broker.tools groups` against a real cluster: list the groups,
describe one (owner, committed offset, log end, lag per partition; as text
and as --json), reset a stopped group's offsets to earliest, latest or a
time (and refuse while its consumers run), and a clear error when ZooKeeper
cannot be reached."""
from __future__ import annotations

import json

from broker.coordination import offsets as zk_offsets
from broker.coordination import paths
from broker_helpers import (NOW_MS, connect, message_set, produce, read_partition, run_module,
                            unused_port, wait_until)
from coordination_helpers import range_assignment, wait_settled


def groups(zk_connect: str, *args: str, timeout: float = 60.0) -> tuple[int, str, str]:
    done = run_module("broker.tools", "groups", "--zookeeper", zk_connect, *args,
                      timeout=timeout)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def describe(zk_connect: str, group: str) -> dict[tuple[str, str], list[str]]:
    """--describe as {(topic, broker-partition): [owner, committed, log end, lag]}."""
    code, out, err = groups(zk_connect, "--describe", group)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split("\t") == ["TOPIC", "PARTITION", "OWNER", "COMMITTED", "LOG-END",
                                    "LAG-BYTES"]
    rows = {(row[0], row[1]): row[2:] for row in (line.split("\t") for line in lines[1:])}
    # --json says the same, typed
    code, out, err = groups(zk_connect, "--describe", group, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["group"] == group
    assert {(p["topic"], p["broker_partition"]): [
        "-" if p[k] is None else str(p[k]) for k in ("owner", "committed", "log_end", "lag_bytes")]
        for p in shown["partitions"]} == rows
    return rows


def test_list_describe_and_reset_a_group(shared_cluster, group_consumers, cluster_producers,
                                         consume, topic):
    partitions = shared_cluster.create_topic(topic, 2)                # 6
    zk, zk_connect, group = shared_cluster.zk, shared_cluster.connect, "tooled"
    producer = cluster_producers(zk_connect, acks="flushed")
    for i in range(120):
        producer.send(topic, b"v%d" % i, key=b"k%d" % i)
    producer.flush(timeout=30)
    ends = {}
    for bp in partitions:
        broker_id, partition = paths.parse_broker_partition(bp)
        with connect(shared_cluster.brokers[broker_id].address) as conn:
            ends[bp] = sum(m.next_offset - m.offset
                           for m in read_partition(conn, topic, partition))
    assert all(ends.values())

    consumers = [group_consumers(zk_connect, group, [topic], consumer_id=f"c{i}",
                                 auto_commit_interval_ms=100) for i in range(2)]
    wait_settled(consumers, zk, group, topic, partitions)
    apps = [consume(c) for c in consumers]
    # the applications take everything, and auto-commit it
    wait_until(lambda: zk_offsets.read_offsets(zk, group) == {
        (topic, bp): end for bp, end in ends.items()}, 20, interval=0.05,
        what="the group to commit everything")

    code, out, err = groups(zk_connect, "--list")
    assert code == 0, err
    assert group in out.split()

    owner = {bp: cid for cid, bps in range_assignment(partitions, ["c0", "c1"]).items()
             for bp in bps}
    assert describe(zk_connect, group) == {(topic, bp): [owner[bp], str(end), str(end), "0"]
                                           for bp, end in ends.items()}

    code, out, err = groups(zk_connect, "--reset-offsets", group, "--to", "earliest")
    assert code == 1
    assert "running consumers" in err and "c0" in err and "c1" in err   # and why
    assert zk_offsets.read_offsets(zk, group) == {(topic, bp): end for bp, end in ends.items()}

    for app in apps:
        app.stop()                                     # the group is stopped now
    assert zk.get_children(paths.consumer_ids_path(group)) == []

    code, out, err = groups(zk_connect, "--reset-offsets", group, "--to", "earliest")
    assert code == 0, err
    assert zk_offsets.read_offsets(zk, group) == {(topic, bp): 0 for bp in partitions}
    assert describe(zk_connect, group) == {(topic, bp): ["-", "0", str(end), str(end)]
                                           for bp, end in ends.items()}

    code, out, err = groups(zk_connect, "--reset-offsets", group, "--to", "latest")
    assert code == 0, err
    assert zk_offsets.read_offsets(zk, group) == {(topic, bp): end for bp, end in ends.items()}

    code, out, err = groups(zk_connect, "--describe", "no-such-group")
    assert code == 1 and "no group" in err


def test_reset_offsets_to_a_time(shared_cluster, zk_client, topic):
    # one partition on broker 0, a segment per produce request, timestamps a second apart
    shared_cluster.create_topic(topic, 1, broker_ids=[0], config={"segment.bytes": "64"})
    zk, zk_connect, group = shared_cluster.zk, shared_cluster.connect, "timely"
    with connect(shared_cluster.brokers[0].address) as conn:
        for i in range(5):
            r = produce(conn, topic, 0, message_set([b"t%d" % i], timestamp=NOW_MS + i * 1000))
            assert r.error == 0, r.message
        stored = read_partition(conn, topic, 0)
    assert [m.value for m in stored] == [b"t%d" % i for i in range(5)]
    zk_offsets.commit_offsets(zk, group, {(topic, "0-0"): stored[-1].next_offset})

    # the start of the newest segment that begins at or before the time: no
    # message at or after it is skipped
    code, out, err = groups(zk_connect, "--reset-offsets", group, "--topic", topic,
                            "--to", str(NOW_MS + 2500))
    assert code == 0, err
    assert zk_offsets.read_offset(zk, group, topic, "0-0") == stored[2].offset
    assert f"{topic}\t0-0\t{stored[2].offset}" in out

    code, out, err = groups(zk_connect, "--reset-offsets", group, "--topic", topic,
                            "--to", str(NOW_MS - 60_000))      # before everything: earliest
    assert code == 0, err
    assert zk_offsets.read_offset(zk, group, topic, "0-0") == 0


def test_unreachable_zookeeper_is_a_clear_error():
    address = f"127.0.0.1:{unused_port()}/nowhere"
    code, out, err = groups(address, "--list", "--timeout", "1", timeout=30)
    assert code == 1
    # the last line says what failed, where (kazoo's own retry warnings come before it)
    last = err.strip().splitlines()[-1]
    assert last.startswith("error:") and "cannot reach ZooKeeper" in last and address in last
    assert "Traceback" not in err and out == ""
