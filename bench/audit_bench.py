"""Benchmarks of issue 10 (schemas and the audit's counting).

    python -m bench.audit_bench [--runs 5] [--messages 2000000] [--json PATH]

Figures (medians of --runs; each run does every figure, both sides of each
comparison one after the other, in the other order every other run):

  avro        encode + decode of a page view (~300 bytes with the envelope)
              through ValueWriter / ValueReader (fastavro): rows/s, one thread.
  kernel      the counting kernel alone over Message tuples: msg/s, C and
              pure Python.
  consume     one broker (a real process) holding --messages page views; a
              Consumer (200 KB fetches, CRC checks on) drains them in this
              process, plain and with a TierCounter counting every poll (the
              cluster tier's work: window, size, id checksum, first sightings,
              latency): msg/s of this one client process (one core; the broker
              has the other).
  producer    batch-50 production (send_many, acks=none, as bench/run.py's
              batch-50 figure) of the same page views, plain and through an
              AuditedProducer: msg/s until the broker holds them all, and the
              client's CPU seconds per million messages (all its threads).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid

from bench.common import log, machine_info

from audit import tally as reference_tally
from audit.counting import AuditedProducer, CounterConfig, TierCounter, kernel_name
from broker.client.admin import AdminClient
from broker.client.consumer import Consumer
from broker.client.producer import Producer
from broker.harness import BrokerProcess
from broker.protocol.message import Message
from schemas import catalog
from schemas.registry import SchemaRegistry
from schemas.stores import FileStore
from schemas.wire import ValueReader, ValueWriter

TOPIC = "page_views"
WINDOW = 600_000


def page_view(i: int, now_ms: int) -> dict:
    return {"header": {"time_ms": now_ms - i % 1000, "host": "web-017.dc-a.example.com",
                       "service": "frontend-profile", "event_id": uuid.uuid4().bytes},
            "member_id": 1_000_000 + i, "page_key": "profile-view",
            "url": f"https://www.example.com/in/member-{i:08d}/details/experience?trk=feed",
            "referrer": "https://www.example.com/feed/update/urn:li:activity:123456789",
            "user_agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0",
            "duration_ms": 37 + i % 50}


def make_values(registry: SchemaRegistry, n: int, now_ms: int) -> list[bytes]:
    """n page-view envelopes: 4,096 distinct records, repeated with fresh ids
    patched in (the id is at a fixed place in each), so building them is cheap."""
    writer = ValueWriter(registry, TOPIC)
    base = [writer.encode(page_view(i, now_ms)) for i in range(4096)]
    out = []
    for i in range(n):
        v = base[i % 4096]
        out.append(v)
    # distinct ids everywhere: rewrite each value's 16 id bytes
    from schemas.header import event_header
    fixed = []
    for v in out:
        eid = event_header(v)[1]
        at = v.index(eid)
        fixed.append(v[:at] + os.urandom(16) + v[at + 16:])
    return fixed


def bench_avro(registry: SchemaRegistry, n: int = 100_000) -> dict:
    writer = ValueWriter(registry, TOPIC)
    reader = ValueReader(registry, subject=TOPIC)
    now = int(time.time() * 1000)
    records = [page_view(i, now) for i in range(1000)]
    t0 = time.perf_counter()
    values = [writer.encode(records[i % 1000]) for i in range(n)]
    t1 = time.perf_counter()
    for v in values:
        reader.decode(v)
    t2 = time.perf_counter()
    return {"value_bytes": statistics.mean(map(len, values[:1000])),
            "encode_rows_per_s": n / (t1 - t0), "decode_rows_per_s": n / (t2 - t1),
            "roundtrip_rows_per_s": n / (t2 - t0)}


def bench_kernel(values: list[bytes], now_ms: int) -> dict:
    messages = [Message(TOPIC, 0, i, i + 1, now_ms - i % 5000, None, v)
                for i, v in enumerate(values[:500_000])]
    out = {}
    from audit.counting import kernel as c_kernel, kernel_name
    if kernel_name() != "C":
        raise SystemExit("bench_kernel: the C kernel is not built (make setup builds it)")
    for name, kernel in (("c", c_kernel), ("python", reference_tally)):
        n = len(messages) if name == "c" else 100_000
        acc, ids = {}, {}
        bounds = CounterConfig(tier="cluster", datacenter="x", cluster="x").latency_bounds_ms
        t0 = time.perf_counter()
        for i in range(0, n, 2000):
            kernel.tally_messages(acc, messages[i:i + 2000], WINDOW, now_ms, bounds, ids)
        out[f"{name}_msgs_per_s"] = n / (time.perf_counter() - t0)
    return out


def fill_broker(address: str, values: list[bytes], now_ms: int) -> None:
    producer = Producer(bootstrap=address, batch_size=50, linger_ms=5, acks="none")
    try:
        for i in range(0, len(values), 1000):
            producer.send_many(TOPIC, values[i:i + 1000], partition=0, timestamp=now_ms)
        producer.flush()
    finally:
        producer.close()
    with AdminClient(address) as admin:
        want = sum(len(v) + 22 for v in values)
        while admin.latest_offset(TOPIC, 0) < want:
            time.sleep(0.05)


def drain(address: str, n: int, counter: TierCounter | None) -> dict:
    consumer = Consumer(bootstrap=address, fetch_max_bytes=200 * 1024, max_wait_ms=100)
    consumer.assign([(TOPIC, 0)], start="earliest")
    got = 0
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        while got < n:
            batch = consumer.poll(1000)
            if counter is not None and batch:
                counter.add_messages(batch)
            got += len(batch)
    finally:
        consumer.close()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"msgs_per_s": n / wall, "client_cpu_s": cpu, "msgs_per_cpu_s": n / cpu}


def produce(address: str, values: list[bytes], audited: bool, now_ms: int) -> dict:
    producer = Producer(bootstrap=address, batch_size=50, linger_ms=5, acks="none")
    counter = None
    if audited:
        counter = TierCounter(CounterConfig(tier="producer", datacenter="dc-a",
                                            cluster="dc-a"))
        sender = AuditedProducer(producer, counter)
    else:
        sender = producer
    with AdminClient(address) as admin:
        start = admin.latest_offset(TOPIC, 1) if admin.partition_count(TOPIC) else 0
    want = start + sum(len(v) + 22 for v in values)
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        for i in range(0, len(values), 1000):
            sender.send_many(TOPIC, values[i:i + 1000], partition=1, timestamp=now_ms)
        sender.flush()
        cpu = time.process_time() - c0
        with AdminClient(address) as admin:
            while admin.latest_offset(TOPIC, 1) < want:
                time.sleep(0.002)
        elapsed = time.perf_counter() - t0
    finally:
        producer.close()
    # client CPU (all its threads, sender included) per million messages: the
    # audit's cost without the broker's and the scheduler's noise
    out = {"msgs_per_s": len(values) / elapsed, "client_cpu_s_per_m": cpu / len(values) * 1e6}
    if counter is not None:
        assert counter.counted == len(values), (counter.counted, len(values))
    return out


def one_run(workdir: str, registry: SchemaRegistry, n: int, run: int) -> dict:
    now = int(time.time() * 1000)
    result = {"avro": bench_avro(registry)}
    values = make_values(registry, n, now)
    result["kernel"] = bench_kernel(values, now)
    broker = BrokerProcess(os.path.join(workdir, f"broker-{run}"),
                           settings={"default_partitions": 2})
    with broker:
        fill_broker(broker.address, values, now)
        counter = TierCounter(CounterConfig(tier="cluster", datacenter="dc-a", cluster="dc-a",
                                            dedup_ids=True))
        # the two sides in turn, in the other order every other run
        for side in (("plain", "counted") if run % 2 == 0 else ("counted", "plain")):
            result[f"consume_{side}"] = drain(broker.address, n,
                                              counter if side == "counted" else None)
        assert counter.counted == n
        events = counter.drain()
        assert sum(e["unique_count"] for e in events) == n
        produce_n = values[: min(n, 1_000_000)]
        for side in (("plain", "audited") if run % 2 == 0 else ("audited", "plain")):
            result[f"produce_{side}"] = produce(broker.address, produce_n, side == "audited",
                                                now)
    return result


FIGURES = [
    ("Avro encode+decode of a page view (rows/s)", "avro", "roundtrip_rows_per_s"),
    ("Avro encode (rows/s)", "avro", "encode_rows_per_s"),
    ("Avro decode, resolved to the latest schema (rows/s)", "avro", "decode_rows_per_s"),
    ("counting kernel, C (msg/s)", "kernel", "c_msgs_per_s"),
    ("counting kernel, pure Python (msg/s)", "kernel", "python_msgs_per_s"),
    ("consume, plain (msg/s)", "consume_plain", "msgs_per_s"),
    ("consume + count, dedup on (msg/s)", "consume_counted", "msgs_per_s"),
    ("consume + count, per client CPU second", "consume_counted", "msgs_per_cpu_s"),
    ("produce batch 50, plain (msg/s)", "produce_plain", "msgs_per_s"),
    ("produce batch 50, audited (msg/s)", "produce_audited", "msgs_per_s"),
    ("produce batch 50, plain: client CPU s per M messages", "produce_plain",
     "client_cpu_s_per_m"),
    ("produce batch 50, audited: client CPU s per M messages", "produce_audited",
     "client_cpu_s_per_m"),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--messages", type=int, default=2_000_000)
    p.add_argument("--json", metavar="PATH")
    a = p.parse_args(argv)
    log(f"machine: {json.dumps(machine_info())}; counting kernel: {kernel_name()}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="samsa-audit-bench-") as workdir:
        registry = SchemaRegistry(FileStore(os.path.join(workdir, "registry.json")))
        registry.register(TOPIC, catalog.load("samsa.events.PageViewEvent"))
        for run in range(a.runs):
            log(f"run {run + 1}/{a.runs}")
            r = one_run(workdir, registry, a.messages, run)
            runs.append(r)
            log("  " + json.dumps({k: {f: round(v, 3) for f, v in d.items()}
                                   for k, d in r.items()}))
    print(f"\n{'figure':55} {'median':>12}   runs")
    table = []
    for label, key, field in FIGURES:
        values = [r[key][field] for r in runs]
        med = statistics.median(values)
        table.append({"figure": label, "median": med, "runs": values})
        fmt = ",.0f" if med >= 100 else ".3f"
        print(f"{label:55} {med:12{fmt}}   {' '.join(f'{v:{fmt}}' for v in values)}")
    ratio = [r["produce_audited"]["msgs_per_s"] / r["produce_plain"]["msgs_per_s"] for r in runs]
    print(f"{'audited / plain producer (ratio within each run)':55} "
          f"{statistics.median(ratio):12.3f}   {' '.join(f'{x:.3f}' for x in ratio)}")
    cpu_ratio = [r["produce_audited"]["client_cpu_s_per_m"] /
                 r["produce_plain"]["client_cpu_s_per_m"] for r in runs]
    print(f"{'audited / plain producer client CPU (within each run)':55} "
          f"{statistics.median(cpu_ratio):12.3f}   {' '.join(f'{x:.3f}' for x in cpu_ratio)}")
    cratio = [r["consume_counted"]["msgs_per_s"] / r["consume_plain"]["msgs_per_s"]
              for r in runs]
    print(f"{'counted / plain consume (ratio within each run)':55} "
          f"{statistics.median(cratio):12.3f}   {' '.join(f'{x:.3f}' for x in cratio)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"machine": machine_info(), "runs": runs, "table": table,
                       "producer_ratio": ratio, "producer_cpu_ratio": cpu_ratio,
                       "consume_ratio": cratio}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
