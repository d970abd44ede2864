"""The warehouse loader's throughput (issue 11), a first measurement.

    python -m bench.loader_bench [--runs 3] [--messages 1000000]

A ZooKeeper server and one broker (4 partitions) are started; each run
produces --messages page views (286-byte envelopes of the shipped schema,
event times over three hours) and loads them with hadoop_loader.job.load on
a Spark session started once (local[2], its start-up timed apart): rows/s
from the brokers to published Parquet. Client, broker and Spark share the
machine's 2 cores.
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--ab", action="store_true",
                   help="alternate runs: the default (no shuffle) and one_file_per_hour")
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
            rates, phases = {}, {}
            variants = {"default (no shuffle)": config,
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
            registry.close()
        finally:
            broker.stop()
            zk.stop()
    for name, got in rates.items():
        print(f"\n{name}: loader rows/s, median of {len(got)}: {statistics.median(got):,.0f}  "
              f"[{' '.join(f'{r:,.0f}' for r in got)}]; Spark start-up {startup:.1f} s")
        for phase in phases[name][0]:
            values = [p[phase] for p in phases[name]]
            print(f"  {phase}: median {statistics.median(values):.2f} s  "
                  f"[{' '.join(f'{v:.2f}' for v in values)}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
