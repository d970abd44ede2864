"""Crashes and restarts of a real broker process: after kill -9 under load,
every message acknowledged with acks=flushed is there, in order, intact; a
clean SIGTERM shutdown flushes and checkpoints, so the next start scans
nothing, while a start after kill -9 rescans what lies past the checkpoint."""
from __future__ import annotations

import os
import threading

from broker.client.admin import AdminClient
from broker.client.producer import Producer
from broker.protocol.api import Acks
from broker.protocol.message import Message

from broker_helpers import (NEVER_FLUSH, connect, high_watermark, log_text, message_set,
                            produce, read_partition, wait_until)

PARTITIONS = 2


def test_kill_9_under_load_loses_no_flushed_acknowledged_message(broker_factory):
    broker = broker_factory()
    with AdminClient(broker.address) as admin:
        admin.create_topic("crash", PARTITIONS)
    # no retries: every batch is either acknowledged once or failed, so the
    # acknowledged ones are exactly what must survive
    producer = Producer(bootstrap=broker.address, acks="flushed", batch_size=50, linger_ms=2,
                        retries=0, retry_backoff_ms=10, buffer_messages=2000)
    sends: list[tuple[object, int, bytes]] = []     # (batch future, partition, value)
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            value = b"message %08d " % i + b"." * (i % 200)
            try:
                future = producer.send("crash", value, partition=i % PARTITIONS)
            except RuntimeError:        # the producer gave up
                return
            sends.append((future, i % PARTITIONS, value))
            i += 1

    loader = threading.Thread(target=load, name="load", daemon=True)
    loader.start()
    try:
        wait_until(lambda: producer.sent_messages >= 5000, timeout=30,
                   what="5000 acknowledged messages")
        broker.kill()
    finally:
        stop.set()
        loader.join(timeout=30)
        producer.close(timeout=60)

    batches: dict[object, tuple[int, list[bytes]]] = {}     # future -> (partition, values)
    for future, partition, value in sends:
        batches.setdefault(future, (partition, []))[1].append(value)
    acked = [(future.result(timeout=0), partition, values)
             for future, (partition, values) in batches.items()
             if future.done() and future.exception() is None]
    assert sum(len(values) for _r, _p, values in acked) >= 5000
    assert len(acked) < len(batches), "the kill should have cut some batches short"

    log_start = os.path.getsize(broker.log_path)
    broker.start()                              # same data dir, same port
    assert "recovery: scanned" in log_text(broker.log_path, log_start)
    with connect(broker.address) as conn:
        logs: dict[int, list[Message]] = {p: read_partition(conn, "crash", p)
                                          for p in range(PARTITIONS)}
    index = {p: {m.offset: i for i, m in enumerate(ms)} for p, ms in logs.items()}
    last_base = {p: -1 for p in range(PARTITIONS)}
    for (partition, base), sent_to, values in acked:
        assert partition == sent_to
        assert base > last_base[partition], "acknowledged batches out of order"
        last_base[partition] = base
        assert base in index[partition], f"acknowledged batch at {partition}/{base} is gone"
        start = index[partition][base]
        assert [m.value for m in logs[partition][start:start + len(values)]] == values


def test_sigterm_flushes_so_the_restart_scans_nothing_and_a_crash_rescans(broker_factory):
    broker = broker_factory(NEVER_FLUSH)

    def start_again() -> str:
        """Restart; the log lines the new process wrote while starting."""
        start = os.path.getsize(broker.log_path)
        broker.start()
        return log_text(broker.log_path, start)

    def values() -> list[bytes]:
        with connect(broker.address) as conn:
            return [m.value for m in read_partition(conn, "restarts", 0)]

    with connect(broker.address) as conn:
        assert produce(conn, "restarts", 0, message_set([b"a", b"b"]), Acks.WRITTEN).error == 0
        assert high_watermark(conn, "restarts", 0) == 0    # written, not flushed
    assert broker.stop() == 0              # SIGTERM: flush, checkpoint, exit 0
    log = start_again()
    assert "recovery:" not in log
    assert values() == [b"a", b"b"]

    with connect(broker.address) as conn:
        assert produce(conn, "restarts", 0, message_set([b"c"]), Acks.FLUSHED).error == 0
    broker.kill()
    log = start_again()
    assert "recovery: scanned" in log
    assert values() == [b"a", b"b", b"c"]
