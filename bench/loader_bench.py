"""The warehouse loader's throughput (issue 11).

    python -m bench.loader_bench [--runs 3] [--messages 1000000] [--ab]

A ZooKeeper server and one broker (4 partitions) are started; each run
produces --messages page views (286-byte envelopes of the shipped schema,
event times over three hours) and loads them with hadoop_loader.job.load on
a Spark session started once (local[2]): rows/s from the brokers to
published Parquet, and seconds per phase. Spark's start-up is timed apart,
and so is the first load after it (the JVM compiles its hot code then); the
medians are of the loads after it. --ab alternates the settings compared
(in one run). Client, broker and Spark share the machine's 2 cores.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time

from bench.common import log, machine_info

from bench.audit_bench import make_values
from broker.client.producer import Producer
from broker.harness import BrokerProcess, ZooKeeperEnsemble
from hadoop_loader import job
from hadoop_loader.config import LoaderConfig
from schemas import catalog
from schemas.registry import SchemaRegistry

HOUR = 3_600_000


def produce(address: str, values: list[bytes], base_ms: int) -> None:
    producer = Producer(bootstrap=address, batch_size=200, linger_ms=5, acks="flushed")
    try:
        for i in range(0, len(values), 1000):
            producer.send_many("page_views", values[i:i + 1000], partition=(i // 1000) % 4,
                               timestamp=base_ms + (i // 1000) % 3 * HOUR)
        producer.flush()
    finally:
        producer.close()


def task_breakdown(config: LoaderConfig, registry) -> dict[str, float]:
    """Where a pull task's time goes, in this process on one core: seconds
    per million messages to fetch (consumer, CRC checks), split the
    envelopes by schema id and frame them into an Avro container file."""
    import io
    import json

    from hadoop_loader.frames import split_envelopes, write_container
    from hadoop_loader.plan import plan
    from hadoop_loader.pull import pull_unit
    unit = max(plan(config.zookeeper, {}, whitelist="page_views",
                    max_unit_bytes=config.max_unit_bytes).units, key=lambda u: u.size)
    t0 = time.perf_counter()
    values, _offsets, _stamps = pull_unit(unit, config.fetch_bytes)
    t1 = time.perf_counter()
    by_schema, _bad = split_envelopes(values)
    t2 = time.perf_counter()
    for sid, bodies in by_schema.items():
        write_container(io.BytesIO(), json.dumps(registry.by_id(sid)), bodies)
    t3 = time.perf_counter()
    per_million = 1e6 / len(values)
    return {"fetch": (t1 - t0) * per_million, "split envelopes": (t2 - t1) * per_million,
            "frame Avro": (t3 - t2) * per_million}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--ab", action="store_true",
                   help="alternate runs: the default, staging_codec=deflate, one_file_per_hour")
    a = p.parse_args(argv)
    log(f"machine: {machine_info()}")
    with tempfile.TemporaryDirectory(prefix="samsa-loader-bench-") as work:
        zk = ZooKeeperEnsemble(1, os.path.join(work, "zk")).start()
        connect = zk.connect_string("/analysis")
        broker = BrokerProcess(os.path.join(work, "broker"), settings={
            "zookeeper": connect, "default_partitions": 4}).start()
        try:
            registry = SchemaRegistry.open(f"zookeeper://{connect}")
            registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
            config = LoaderConfig(zookeeper=connect, output=os.path.join(work, "warehouse"),
                                  master="local[2]", whitelist="page_views",
                                  max_unit_bytes=32 << 20)
            t0 = time.monotonic()
            spark = job.spark_session(config)
            spark.sparkContext.setLogLevel("ERROR")
            startup = time.monotonic() - t0
            log(f"Spark start-up {startup:.1f} s")
            base = int(time.time() * 1000) - 5 * HOUR
            produce(broker.address, make_values(registry, a.messages, base), base)
            first = job.load(config, spark)
            first_rate = first.messages / first.seconds
            log(f"first load after start-up: {first.messages:,} messages in "
                f"{first.seconds:.1f} s = {first_rate:,.0f} rows/s")
            rates, phases = {}, {}
            variants = {"default (staging uncompressed, no shuffle)": config,
                        "staging deflate": dataclasses.replace(config, staging_codec="deflate"),
                        "one file per hour (a shuffle)": dataclasses.replace(
                            config, one_file_per_hour=True)}
            for run in range(a.runs * (len(variants) if a.ab else 1)):
                name = list(variants)[run % len(variants)] if a.ab else list(variants)[0]
                base = int(time.time() * 1000) - 5 * HOUR
                produce(broker.address, make_values(registry, a.messages, base), base)
                summary = job.load(variants[name], spark)
                rate = summary.messages / summary.seconds
                rates.setdefault(name, []).append(rate)
                log(f"run {run + 1} ({name}): {summary.messages:,} messages in "
                    f"{summary.seconds:.1f} s "
                    f"= {rate:,.0f} rows/s ({summary.units} work units); " + ", ".join(
                        f"{k} {v:.1f} s" for k, v in summary.phases.items()))
                phases.setdefault(name, []).append(summary.phases)
            spark.stop()
            pieces = task_breakdown(config, registry)
            registry.close()
        finally:
            broker.stop()
            zk.stop()
    print(f"\nSpark start-up {startup:.1f} s; the first load after it {first_rate:,.0f} rows/s")
    print("inside one task, one core, per million messages: " + ", ".join(
        f"{k} {v:.2f} s" for k, v in pieces.items()))
    for name, got in rates.items():
        print(f"\n{name}: loader rows/s, median of {len(got)}: {statistics.median(got):,.0f}  "
              f"[{' '.join(f'{r:,.0f}' for r in got)}]")
        for phase in phases[name][0]:
            values = [p[phase] for p in phases[name]]
            print(f"  {phase}: median {statistics.median(values):.2f} s  "
                  f"[{' '.join(f'{v:.2f}' for v in values)}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
