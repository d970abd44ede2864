"""The mirror under faults (real ZooKeeper and brokers): killed with -9 and
restarted, the target cluster down for a while, a source broker killed and
back. In every case each message the source acknowledged ends up in the
target; duplicates are counted and bounded."""
from __future__ import annotations

import pytest
import signal
import threading
import time

from broker.client.admin import AdminClient
from broker.client.producer import Producer
from broker.coordination import offsets as zk_offsets
from broker.protocol.message import message_size
from broker_helpers import metric, scrape_metrics, wait_until
from mirror_helpers import mirror_config, values_of

VALUE_BYTES = 200
SIZE = message_size(None, b"x" * VALUE_BYTES)      # every test message has this size


def value(i: int) -> bytes:
    return f"{i:012d}".encode().ljust(VALUE_BYTES, b".")


def produce(address: str, topic: str, first: int, count: int, partitions: int) -> list[bytes]:
    """``count`` unique values through one broker, acknowledged as flushed;
    returns the values acknowledged."""
    with Producer(bootstrap=address, acks="flushed", batch_size=500, linger_ms=5) as producer:
        batches = [(producer.send(topic, value(i), partition=i % partitions), value(i))
                   for i in range(first, first + count)]
        producer.flush(60)
    return [v for batch, v in batches if batch.exception() is None]


def messages_in(cluster, topic: str) -> int:
    """Messages of ``topic`` on the cluster's running brokers (all SIZE bytes)."""
    total = 0
    for broker in cluster.brokers.values():
        if broker.proc is None or broker.proc.poll() is not None:
            continue
        with AdminClient(broker.address) as admin:
            count = admin.partition_count(topic) or 0
            total += sum(admin.latest_offset(topic, p) for p in range(count))
    return total // SIZE


def quiesced(cluster) -> bool:
    """No client is connected to the cluster's running brokers any more and
    everything they appended is flushed: what a dead (or stopped) mirror sent
    has all been handled, so counting the target now gives its final number.
    An event the brokers report, not a quiet period."""
    for broker in cluster.brokers.values():
        if broker.proc is None or broker.proc.poll() is not None:
            continue
        samples = scrape_metrics(broker.metrics_port)
        if metric(samples, "samsa_connections") != 0:
            return False
        ends = {labels: v for (name, labels), v in samples.items()
                if name == "samsa_log_end_offset"}
        flushed = {labels: v for (name, labels), v in samples.items()
                   if name == "samsa_log_flushed_offset"}
        if ends != flushed:
            return False
    return True


@pytest.mark.slow
def test_kill_9_the_mirror_and_restart_loses_nothing(clusters, mirror_processes):
    dc_a, analysis = clusters("dc-a"), clusters("analysis")
    dc_a.create_topic("events", 2)
    config = mirror_config([dc_a], analysis, max_unacknowledged=5000, batch_size=500,
                           commit_interval_ms=200, target_partitions=2)
    first = mirror_processes(config)
    sent: list[bytes] = []
    stop = threading.Event()

    def keep_producing():        # ~10 k msg/s for 6 s, while the mirror copies
        for i in range(0, 60_000, 1000):
            sent.extend(produce(dc_a.brokers[0].address, "events", i, 1000, 2))
            if stop.wait(0.1):
                return

    producer = threading.Thread(target=keep_producing)
    producer.start()
    try:
        def committed() -> int:
            return sum(zk_offsets.read_offsets(dc_a.zk, "mirror-test").values()) // SIZE
        wait_until(lambda: committed() >= 15_000, 60, what="the mirror to be well into the copy")
        first.kill()
        committed_at_kill = committed()
        wait_until(lambda: quiesced(analysis), 30, what="the target to handle what the dead "
                                                         "mirror had sent")
        in_target = messages_in(analysis, "events")
    finally:
        producer.join(60)
    assert len(sent) == 60_000
    assert committed_at_kill < 60_000, "killed too late: everything was committed already"
    # what a restart may copy twice: in the target but not committed in the source
    bound = in_target - committed_at_kill

    second = mirror_processes(config)
    wait_until(lambda: messages_in(analysis, "events") >= 60_000, 90,
               what="the restarted mirror to copy the rest")
    second.send_signal(signal.SIGTERM)
    assert second.wait(60) == 0
    wait_until(lambda: quiesced(analysis), 30, what="the target to settle")
    copied = values_of(analysis, "events")
    assert set(copied) == set(sent), "a message was lost"
    duplicates = len(copied) - len(set(copied))
    print(f"kill -9 at {in_target} copied / {committed_at_kill} committed: {duplicates} "
          f"duplicates (bound {bound})")
    assert duplicates <= bound


@pytest.mark.slow
def test_target_down_for_a_while(clusters, mirrors):
    dc_a, analysis = clusters("dc-a"), clusters("analysis")
    dc_a.create_topic("events", 2)
    sent = produce(dc_a.brokers[0].address, "events", 0, 5_000, 2)
    mirror = mirrors(mirror_config([dc_a], analysis, retry_backoff_ms=100,
                                   retry_backoff_max_ms=1000))
    wait_until(lambda: mirror.copied == 5_000, 60, what="the first copy")

    target = analysis.brokers[0]
    target.kill()
    sent += produce(dc_a.brokers[0].address, "events", 5_000, 5_000, 2)
    wait_until(lambda: mirror.metrics.send_errors, 30, what="the mirror to meet the outage")
    assert mirror.copied == 5_000
    # the lag probe shows what waits: 5,000 messages, in bytes and (estimated) messages
    wait_until(lambda: mirror.metrics.total_lag_bytes("dc-a") == 5_000 * SIZE, 30,
               what="the lag to show the held-back messages")
    keys = [k for k in mirror.metrics.lag_bytes if k[0] == "dc-a"]
    assert round(sum(mirror.metrics.lag_messages(k) for k in keys)) == 5_000
    target.start()                       # same port, same data
    wait_until(lambda: mirror.copied >= 10_000, 90, what="the mirror to catch up")
    wait_until(lambda: mirror.metrics.total_lag_bytes("dc-a") == 0, 30, what="lag back to 0")
    copied = values_of(analysis, "events")
    assert set(copied) == set(sent)
    assert len(copied) - len(set(copied)) <= mirror.config.max_unacknowledged
    assert sum(mirror.metrics.resent.values()) >= 1


def test_source_broker_killed_and_back(clusters, mirrors):
    dc_a, analysis = clusters("dc-a", brokers=2), clusters("analysis")
    dc_a.create_topic("events", 2)
    mirror = mirrors(mirror_config([dc_a], analysis))
    b0, b1 = dc_a.brokers[0], dc_a.brokers[1]
    sent = produce(b0.address, "events", 0, 3_000, 2) + produce(b1.address, "events", 3_000,
                                                                3_000, 2)
    wait_until(lambda: mirror.copied == 6_000, 60, what="the first copy")

    b1.kill()
    sent += produce(b0.address, "events", 6_000, 3_000, 2)
    wait_until(lambda: mirror.copied >= 9_000, 60, what="broker 0's partitions go on")
    b1.start()
    wait_until(lambda: dc_a.zk.exists("/brokers/topics/events/1"), 30,
               what="broker 1 back with its topic")
    sent += produce(b1.address, "events", 9_000, 3_000, 2)
    wait_until(lambda: mirror.copied >= 12_000, 60,
               what="the mirror to resume broker 1's partitions")
    copied = values_of(analysis, "events")
    assert set(copied) == set(sent)
    assert len(copied) - len(set(copied)) <= mirror.config.max_unacknowledged


def test_a_send_no_retry_can_cure_stops_the_mirror_loudly(clusters, mirror_processes):
    dc_a = clusters("dc-a")
    analysis = clusters("analysis", settings={"max_message_bytes": 1000})
    dc_a.create_topic("events", 1)
    with Producer(bootstrap=dc_a.brokers[0].address, acks="flushed") as producer:
        for i in range(10):
            producer.send("events", b"small", partition=0)
        producer.flush(30)
        big_at = 10 * message_size(None, b"small")      # the big message's offset
        producer.send("events", b"B" * 5000, partition=0)
        for i in range(10):
            producer.send("events", b"small", partition=0)
        producer.flush(30)
    proc = mirror_processes(mirror_config([dc_a], analysis, retry_backoff_ms=50))
    assert proc.wait(60) == 1
    log = open(mirror_processes.logs[-1][1]).read()
    assert "CRITICAL" in log and "MESSAGE_TOO_LARGE" in log
    committed = zk_offsets.read_offsets(dc_a.zk, "mirror-test").get(("events", "0-0"), 0)
    assert committed <= big_at        # neither the big message nor any after it skipped


def test_sigterm_while_the_target_is_down_stops_promptly_and_loses_nothing(
        clusters, mirror_processes):
    dc_a, analysis = clusters("dc-a"), clusters("analysis")
    dc_a.create_topic("events", 2)
    sent = produce(dc_a.brokers[0].address, "events", 0, 2_000, 2)
    config = mirror_config([dc_a], analysis, retry_backoff_ms=100, retry_backoff_max_ms=500)
    first = mirror_processes(config)
    wait_until(lambda: messages_in(analysis, "events") == 2_000, 60, what="the first copy")
    analysis.brokers[0].kill()
    sent += produce(dc_a.brokers[0].address, "events", 2_000, 2_000, 2)
    log_path = mirror_processes.logs[-1][1]
    wait_until(lambda: "sending them again" in open(log_path).read(), 60,
               what="the mirror to meet the outage")
    started = time.monotonic()
    first.send_signal(signal.SIGTERM)
    assert first.wait(30) == 0
    assert time.monotonic() - started < 20, "a stop must not wait for the target"
    analysis.brokers[0].start()
    second = mirror_processes(config)
    wait_until(lambda: set(values_of(analysis, "events")) == set(sent), 90,
               what="the restarted mirror to copy what was held back")
    second.send_signal(signal.SIGTERM)
    assert second.wait(60) == 0
