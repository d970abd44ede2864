"""Mirror benchmark: two source datacenters copied into the analysis cluster.

Starts one ZooKeeper server and three brokers (dc-a, dc-b, analysis; each its
own cluster under its own chroot) as real processes, then, for each run:

* throughput — preloads ``--messages`` 200-byte messages into a fresh topic in
  each DC (4 partitions per broker), starts ``python -m mirror`` (a process of
  its own) and times the copy by polling the analysis broker's log ends: the
  rate over the whole copy (from the first message in the target to the
  last) and in steady state (10% to 90% of the messages).
* latency — a producer in each DC sends 5,000 msg/s (10,000 msg/s in all, the
  paper's asynchronous producer: batched, acks none) for ``--seconds``, stamped
  with the send time; a consumer of the analysis cluster takes each message
  as soon as it is readable there and records now - timestamp. The first
  3 s (topic creation, rebalance) are left out.

Everything shares this 2-core machine; brokers use the default settings
(flush every 50 ms or 10,000 messages). Medians of ``--runs`` runs go to
bench/results/mirror-<date>.json and the mirror-bench section of
bench/RESULTS.md. Targets: >= 1,000,000 msg/s (issue 14; first 300,000); p99 <= 1 s.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

from broker.client.admin import AdminClient  # noqa: E402
from broker.client.consumer import Consumer  # noqa: E402
from broker.client.producer import Producer  # noqa: E402
from broker.harness import BrokerProcess, ZooKeeperEnsemble  # noqa: E402
from broker.service_kit.process import SupervisedProcess  # noqa: E402
from broker.protocol.message import message_size  # noqa: E402
from broker.service_kit.settings import to_toml  # noqa: E402
from broker.coordination.named_cluster import NamedCluster  # noqa: E402
from mirror.config import MirrorConfig  # noqa: E402
from bench.common import (machine_info, percentile, proc_cpu_seconds,  # noqa: E402
                          random_values, write_section)

MARK_START, MARK_END = "<!-- mirror-bench:start -->", "<!-- mirror-bench:end -->"
VALUE_SIZE = 200
SIZE = message_size(None, b"x" * VALUE_SIZE)
PARTITIONS = 4
DCS = ("dc-a", "dc-b")
THROUGHPUT_TARGET = 1_000_000
LATENCY_P99_TARGET_MS = 1000
WARMUP_S = 3.0


def log(msg: str) -> None:
    print(f"[mirror-bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class BenchClusters:
    """ZooKeeper and one broker per cluster, in a temporary directory."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.zk = ZooKeeperEnsemble(1, os.path.join(base, "zk")).start()
        self.brokers: dict[str, BrokerProcess] = {}
        for name in DCS + ("analysis",):
            broker = BrokerProcess(os.path.join(base, name), metrics_port=-1,
                                   settings={"zookeeper": self.zk.connect_string(f"/{name}")},
                                   log_path=os.path.join(base, f"{name}.log"))
            self.brokers[name] = broker.start()

    def ref(self, name: str) -> NamedCluster:
        return NamedCluster(name, self.zk.connect_string(f"/{name}"))

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.stop()
        self.zk.stop()


def target_messages(admin: AdminClient, topic: str) -> int:
    count = admin.partition_count(topic)
    if not count:
        return 0
    return sum(admin.latest_offset(topic, p) for p in range(count)) // SIZE


def start_mirror(lab: BenchClusters, base: str, group: str, topic: str,
                 settings: dict | None = None) -> SupervisedProcess:
    config = MirrorConfig(sources=tuple(lab.ref(dc) for dc in DCS), target=lab.ref("analysis"),
                          group=group, whitelist=topic, metrics_port=-1,
                          target_partitions=PARTITIONS, **(settings or {}))
    path = os.path.join(base, f"{group}.toml")
    with open(path, "w") as f:
        f.write(to_toml(config))
    return SupervisedProcess(group, [sys.executable, "-m", "mirror", "--config", path,
                                     "--log-format", "json"],
                             os.path.join(base, f"{group}.log")).start()


def throughput_run(lab: BenchClusters, base: str, run: int, per_dc: int,
                   values: list[bytes], settings: dict | None = None, tag: str = "") -> dict:
    topic = f"mirror-tput-{run}{tag}"
    for dc in DCS:
        address = lab.brokers[dc].address
        with AdminClient(address) as admin:
            admin.create_topic(topic, PARTITIONS)
        with Producer(bootstrap=address, acks="written", batch_size=500,
                      batch_bytes=1 << 20) as producer:
            chunk = [values[i % len(values)] for i in range(500)]
            for i in range(0, per_dc, 500):
                producer.send_many(topic, chunk, partition=(i // 500) % PARTITIONS)
            producer.flush(120)
    total = per_dc * len(DCS)
    time.sleep(0.2)                  # the DC brokers' last flush (50 ms)
    admin = AdminClient(lab.brokers["analysis"].address)
    cpu0 = {name: proc_cpu_seconds(b.proc.pid) for name, b in lab.brokers.items()}
    started = time.monotonic()
    proc = start_mirror(lab, base, f"bench-tput-{run}{tag}", topic, settings)
    timeline: list[tuple[float, int]] = []
    try:
        while True:
            n = target_messages(admin, topic)
            timeline.append((time.monotonic() - started, n))
            if n >= total:
                break
            if proc.poll() is not None:
                raise RuntimeError(f"the mirror exited with {proc.returncode}; see "
                                   f"{base}/bench-tput-{run}{tag}.log")
            if time.monotonic() - started > 600:
                raise RuntimeError("the copy took more than 10 minutes")
            time.sleep(0.02)
        mirror_cpu = proc_cpu_seconds(proc.pid)
    finally:
        proc.stop(60)
        admin.close()
    cpu = {name: proc_cpu_seconds(b.proc.pid) - cpu0[name] for name, b in lab.brokers.items()}

    def when(fraction: float) -> float:
        return next(t for t, n in timeline if n >= fraction * total)

    first = next(t for t, n in timeline if n > 0)
    done = timeline[-1][0]
    t10, t90 = when(0.1), when(0.9)
    result = {"messages": total, "startup_s": first, "copy_s": done - first,
              "overall_msg_s": total / (done - first),
              "steady_msg_s": 0.8 * total / (t90 - t10), "mirror_cpu_s": mirror_cpu,
              "broker_cpu_s": cpu}
    log(f"throughput run {run}: {result['overall_msg_s']:,.0f} msg/s overall, "
        f"{result['steady_msg_s']:,.0f} steady, first copy after {first:.2f} s, "
        f"mirror CPU {mirror_cpu:.1f} s for {done - first:.1f} s")
    return result


def latency_run(lab: BenchClusters, base: str, run: int, seconds: float, rate: int,
                values: list[bytes]) -> dict:
    topic = f"mirror-lat-{run}"
    for dc in DCS:
        with AdminClient(lab.brokers[dc].address) as admin:
            admin.create_topic(topic, PARTITIONS)
    proc = start_mirror(lab, base, f"bench-lat-{run}", topic)
    latencies: list[float] = []
    stop = threading.Event()
    first_send = time.time() * 1000

    def consume() -> None:
        address = lab.brokers["analysis"].address
        with AdminClient(address) as admin:
            while not stop.is_set() and not admin.partition_count(topic):
                time.sleep(0.05)
            count = admin.partition_count(topic) or 0
        consumer = Consumer(bootstrap=address, max_wait_ms=100)
        consumer.assign([(topic, p) for p in range(count)], start="earliest")
        try:
            while not stop.is_set():
                messages = consumer.poll(200)
                now = time.time() * 1000
                latencies.extend(now - m.timestamp for m in messages
                                 if m.timestamp >= first_send + WARMUP_S * 1000)
        finally:
            consumer.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    producers = [Producer(bootstrap=lab.brokers[dc].address, acks="none", linger_ms=5)
                 for dc in DCS]
    per_tick = 50                                  # messages per producer per tick
    tick = per_tick * len(producers) / rate        # seconds between ticks
    sent = 0
    try:
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            due = start + (sent // (per_tick * len(producers))) * tick
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            for i, producer in enumerate(producers):
                for k in range(per_tick):
                    producer.send(topic, values[(sent + k) % len(values)],
                                  partition=(sent // per_tick + i) % PARTITIONS)
            sent += per_tick * len(producers)
        for producer in producers:
            producer.flush(30)
        time.sleep(2.0)                            # let the tail arrive
    finally:
        stop.set()
        reader.join(10)
        for producer in producers:
            producer.close()
        proc.stop(60)
    latencies.sort()
    result = {"sent": sent, "rate_msg_s": sent / seconds, "measured": len(latencies),
              "p50_ms": percentile(latencies, 50), "p99_ms": percentile(latencies, 99),
              "max_ms": latencies[-1] if latencies else float("nan")}
    log(f"latency run {run}: {result['measured']} messages, p50 {result['p50_ms']:.0f} ms, "
        f"p99 {result['p99_ms']:.0f} ms, max {result['max_ms']:.0f} ms")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each test (default 3)")
    p.add_argument("--messages", type=int, default=1_000_000,
                   help="messages preloaded per DC for the throughput test (default 1000000)")
    p.add_argument("--seconds", type=float, default=20.0,
                   help="length of each latency run (default 20)")
    p.add_argument("--rate", type=int, default=10_000,
                   help="total msg/s of the latency test (default 10000)")
    p.add_argument("--no-write", action="store_true", help="print, do not write results")
    p.add_argument("--ab", action="append", default=[], metavar="KEY=VALUE",
                   help="also run each throughput test with this mirror setting (e.g. "
                        "forward_bytes=false), alternating, and print both medians and "
                        "their ratio (printed only; RESULTS.md keeps the default's figures)")
    args = p.parse_args(argv)
    ab = {}
    for kv in args.ab:
        key, _, value = kv.partition("=")
        ab[key] = {"true": True, "false": False}.get(value.lower(), value)
    base = tempfile.mkdtemp(prefix="samsa-mirror-bench-")
    values = random_values(1024, VALUE_SIZE)
    lab = BenchClusters(base)
    try:
        throughput, latency, other = [], [], []
        for run in range(args.runs):
            if ab:
                other.append(throughput_run(lab, base, run, args.messages, values, ab, "-ab"))
            throughput.append(throughput_run(lab, base, run, args.messages, values))
            latency.append(latency_run(lab, base, run, args.seconds, args.rate, values))
        if ab:
            b = statistics.median(r["overall_msg_s"] for r in other)
            c = statistics.median(r["overall_msg_s"] for r in throughput)
            log(f"A/B: with {ab}: {b:,.0f} msg/s {[round(r['overall_msg_s']) for r in other]}; "
                f"default: {c:,.0f} msg/s {[round(r['overall_msg_s']) for r in throughput]}; "
                f"ratio {c / b:.2f}")
    finally:
        lab.stop()
    shutil.rmtree(base, ignore_errors=True)
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(), "runs": args.runs, "messages_per_dc": args.messages,
        "latency_seconds": args.seconds, "latency_rate": args.rate,
        "throughput": throughput, "latency": latency, "ab_settings": ab, "ab_throughput": other,
        "median": {
            "overall_msg_s": statistics.median(r["overall_msg_s"] for r in throughput),
            "steady_msg_s": statistics.median(r["steady_msg_s"] for r in throughput),
            "p50_ms": statistics.median(r["p50_ms"] for r in latency),
            "p99_ms": statistics.median(r["p99_ms"] for r in latency),
        }}
    m = result["median"]
    log(f"medians: {m['overall_msg_s']:,.0f} msg/s overall ({m['steady_msg_s']:,.0f} steady); "
        f"latency p50 {m['p50_ms']:.0f} ms, p99 {m['p99_ms']:.0f} ms")
    if not args.no_write:
        write(result)
    return 0


def write(result: dict) -> None:
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    name = f"mirror-{result['date'][:10]}.json"
    with open(os.path.join(HERE, "results", name), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    m, t, lat = result["median"], result["throughput"], result["latency"]
    mach = result["machine"]
    ok = lambda good: "yes" if good else "**no**"  # noqa: E731
    runs = lambda rows, key, fmt: ", ".join(format(r[key], fmt) for r in rows)  # noqa: E731
    cpu = statistics.median(r["mirror_cpu_s"] / r["copy_s"] for r in t)
    section = "\n".join([
        f"## Mirror: two DCs into the analysis cluster ({result['date'][:10]})", "",
        f"**Method:** `bench/mirror_bench.py` (`make bench-mirror`): one ZooKeeper server and three "
        f"brokers (dc-a, dc-b, analysis: three clusters under their own chroots), default "
        f"broker settings (flush every 50 ms), and `python -m mirror` as its own process, "
        f"all on this machine ({mach.get('nproc')} cores, {mach.get('cpu_model', '?')}, C "
        f"accelerator {'on' if mach.get('c_accelerator') else 'off'}). Throughput: "
        f"{result['messages_per_dc']:,} 200-byte messages preloaded in each DC "
        f"({PARTITIONS} partitions), copied with acks = flushed, timed from the first message "
        f"readable in the target to the last (steady: 10% to 90%). Latency: "
        f"{result['latency_rate']:,} msg/s produced in the two DCs for "
        f"{result['latency_seconds']:.0f} s, time from the send to readable in the analysis "
        f"cluster (first {WARMUP_S:.0f} s left out). Medians of {result['runs']} runs.", "",
        "| Figure | Result | Runs | Target | Met |", "|---|---|---|---|---|",
        f"| Mirror throughput | {m['overall_msg_s']:,.0f} msg/s | "
        f"{runs(t, 'overall_msg_s', ',.0f')} | >= {THROUGHPUT_TARGET:,} msg/s | "
        f"{ok(m['overall_msg_s'] >= THROUGHPUT_TARGET)} |",
        f"| Mirror throughput, steady | {m['steady_msg_s']:,.0f} msg/s | "
        f"{runs(t, 'steady_msg_s', ',.0f')} | | |",
        f"| End-to-end latency p50 | {m['p50_ms']:.0f} ms | {runs(lat, 'p50_ms', '.0f')} | | |",
        f"| End-to-end latency p99 | {m['p99_ms']:.0f} ms | {runs(lat, 'p99_ms', '.0f')} | "
        f"<= {LATENCY_P99_TARGET_MS} ms | {ok(m['p99_ms'] <= LATENCY_P99_TARGET_MS)} |", "",
        f"The mirror process used {cpu:.2f} CPU cores during the copy (median). "
        f"Raw runs: `bench/results/{name}`.", ""])
    write_section(os.path.join(HERE, "RESULTS.md"), section, MARK_START, MARK_END)
    log(f"wrote bench/results/{name} and bench/RESULTS.md")


if __name__ == "__main__":
    sys.exit(main())
