"""How the broker's cost grows with its work (issue 14, item 6): ``make bench-scale``.

    .venv/bin/python -m bench.scale                       # every part (~6 min)
    .venv/bin/python -m bench.scale --parts idle,segments # some of them
    .venv/bin/python -m bench.scale --quick               # small sizes, no RESULTS.md

Parts (each on its own fresh broker process; clients in other processes; 200-byte
values, 222 bytes in the log):

  partitions  one topic of P = 1, 10, 100, 1000 partitions; one producer
              (acks=none, batch 50, send_many) spreads N messages over them
              round robin; msg/s until all are in the broker, broker CPU per
              million messages, broker RSS after; then the broker's CPU while
              it sits idle holding those partitions
  clients     1, 2, 4, 8 producers in parallel processes (each its own
              partition of one 8-partition topic), total msg/s; then 1, 2, 4,
              8 consumers in parallel, each draining its own partition
  idle        1, 10, 100, 500 consumers long-polling an empty partition with
              the client's default settings (max_wait_ms 500): broker CPU %
              over 10 s, which must stay near zero
  segments    lookups with 10,000 segments in one partition against 1
              segment: random-offset fetches per second from one client (the
              bisect over segment bases), and the broker's restart time
  recovery    recovery time after kill -9 against the bytes written since the
              last checkpoint (checkpoints and flush timers pushed out of the
              way, so everything written is beyond the recovery point)

Writes bench/results/scale-<date>.json, plots bench/results/scale-<date>-*.png and
the section between the scale markers in bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from bench.common import (DISTINCT_VALUES, HERE, MESSAGE_BYTES, ROOT, git_state, log,
                          machine_info, parse_result, proc_cpu_seconds, proc_cpu_times,
                          random_values, save_results)

MARK_START = "<!-- scale-bench:start -->"
MARK_END = "<!-- scale-bench:end -->"
PARTS = ("partitions", "clients", "idle", "segments", "recovery")


# ====================================================================== workers

def await_start(p: dict) -> None:
    """With ``barrier``: say READY, then wait for the driver's go (a line on
    stdin), so parallel workers start together, after their start-up."""
    if p.get("barrier"):
        print("READY", flush=True)
        sys.stdin.readline()


def worker_produce(p: dict) -> dict:
    """acks=none, batch 50 via send_many, round robin over ``partitions``."""
    from broker.client.admin import AdminClient
    from broker.client.producer import Producer, ProducerConfig
    n, topic, parts = p["n"], p["topic"], p["partitions"]
    values = random_values()
    mask = DISTINCT_VALUES - 1
    chunks = [[values[(k * 50 + j) & mask] for j in range(50)] for k in range(DISTINCT_VALUES)]
    producer = Producer(ProducerConfig(bootstrap=p["bootstrap"], acks="none", batch_size=50,
                                       linger_ms=5))
    producer.conn.connect()
    await_start(p)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for k in range(n // 50):
        producer.send_many(topic, chunks[k & mask], partition=parts[k % len(parts)])
    producer.flush()
    t_flush = time.perf_counter()
    client_cpu = time.process_time() - cpu0
    producer.close()
    expected = n * MESSAGE_BYTES
    with AdminClient(p["bootstrap"]) as admin:
        deadline = time.perf_counter() + 300
        while True:
            total = sum(admin.latest_offset(topic, q) for q in parts)
            if total >= expected or time.perf_counter() > deadline:
                break
            time.sleep(0.005)
    t_all = time.perf_counter()
    out = {"n": n // 50 * 50, "flush_s": t_flush - t0, "all_in_broker_s": t_all - t0,
           "client_cpu_s": client_cpu,
           "msgs_per_s": (n // 50 * 50) / (t_all - t0)}
    if total < (n // 50 * 50) * MESSAGE_BYTES:
        out["error"] = f"broker holds {total} bytes, expected {expected}"
    return out


def worker_consume(p: dict) -> dict:
    from broker.client.consumer import Consumer, ConsumerConfig
    consumer = Consumer(ConsumerConfig(bootstrap=p["bootstrap"], fetch_max_bytes=200 * 1024,
                                       check_crcs=True))
    consumer.assign([(p["topic"], q) for q in p["partitions"]], start="earliest")
    await_start(p)
    count = 0
    t0 = time.perf_counter()
    while count < p["n"]:
        msgs = consumer.poll(timeout_ms=10_000)
        if not msgs:
            break
        count += len(msgs)
    elapsed = time.perf_counter() - t0
    consumer.close()
    out = {"n": count, "elapsed_s": elapsed, "msgs_per_s": count / elapsed}
    if count < p["n"]:
        out["error"] = f"read {count} of {p['n']}"
    return out


def worker_idle(p: dict) -> dict:
    """``count`` consumers (threads), each long-polling the empty partition
    with the client's default settings until told to stop (stdin closes)."""
    import threading
    from broker.client.consumer import Consumer, ConsumerConfig
    stop = threading.Event()
    polls = [0] * p["count"]
    ready = threading.Barrier(p["count"] + 1)

    def run(i: int) -> None:
        consumer = Consumer(ConsumerConfig(bootstrap=p["bootstrap"]))
        consumer.assign([(p["topic"], 0)], start="latest")
        ready.wait()
        while not stop.is_set():
            consumer.poll(timeout_ms=1000)      # its fetches long-poll max_wait_ms (500)
            polls[i] += 1
        consumer.close()
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(p["count"])]
    for t in threads:
        t.start()
    ready.wait()
    print("READY", flush=True)
    sys.stdin.read()
    stop.set()
    for t in threads:
        t.join(timeout=5)
    return {"polls": sum(polls)}


def worker_lookups(p: dict) -> dict:
    """Random-offset fetches (each a message's worth) for ``seconds``."""
    from broker.client.connection import BrokerConnection
    from broker.protocol import api
    host, port = p["bootstrap"].rsplit(":", 1)
    conn = BrokerConnection(host, int(port), "scale-lookups")
    conn.connect()
    rng = random.Random(7)
    last = p["messages"] - 1
    count = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < p["seconds"]:
        offset = rng.randint(0, last) * MESSAGE_BYTES
        resp = conn.request(api.FetchRequest(0, 1, (api.FetchEntry(p["topic"], 0, offset,
                                                                   MESSAGE_BYTES),)))
        r = resp.results[0]
        if r.error or len(r.message_set) != MESSAGE_BYTES:
            return {"error": f"fetch at {offset}: error {r.error}, {len(r.message_set)} bytes"}
        count += 1
    elapsed = time.perf_counter() - t0
    conn.close()
    return {"fetches": count, "fetches_per_s": count / elapsed,
            "us_per_fetch": 1e6 * elapsed / count}


WORKERS = {"produce": worker_produce, "consume": worker_consume, "idle": worker_idle,
           "lookups": worker_lookups}


# ====================================================================== driver

def worker_cmd(kind: str, params: dict) -> list[str]:
    return [sys.executable, "-m", "bench.scale", "--worker", kind, json.dumps(params)]


def run_worker(kind: str, params: dict, timeout: float = 900) -> dict:
    out = subprocess.run(worker_cmd(kind, params), capture_output=True, text=True, cwd=ROOT,
                         timeout=timeout)
    return parse_result(kind, out.returncode, out.stdout)


def run_parallel(kind: str, params: list[dict], timeout: float = 900) -> list[dict]:
    """Start the workers, wait until each is connected and ready, then let them
    all go at once."""
    procs = [subprocess.Popen(worker_cmd(kind, {**p, "barrier": True}), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT) for p in params]
    for pr in procs:
        line = pr.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"{kind} worker did not start: {line!r}")
    for pr in procs:
        pr.stdin.write("go\n")
        pr.stdin.flush()
    return [parse_result(kind, pr.returncode, pr.communicate(timeout=timeout)[0])
            for pr in procs]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def broker_counter(metrics_port: int, prefix: str) -> float:
    """The first sample on the broker's /metrics whose line starts with ``prefix``."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(prefix):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def fetch_requests(metrics_port: int) -> float:
    """The broker's count of Fetch requests answered."""
    return broker_counter(metrics_port, 'samsa_requests_total{api="fetch"}')


def cpu_over(pid: int, seconds: float) -> float:
    """The process's CPU use over ``seconds``, in % of one core."""
    c0, t0 = proc_cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)
    return 100 * (proc_cpu_seconds(pid) - c0) / (time.perf_counter() - t0)


class Scale:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.workdir = tempfile.mkdtemp(prefix="samsa-scale-")
        self.count = 0

    def broker(self, settings: dict | None = None, metrics_port: int = -1):
        from broker.harness import BrokerProcess
        self.count += 1
        return BrokerProcess(os.path.join(self.workdir, f"b{self.count}"),
                             settings=settings or {}, metrics_port=metrics_port).start()

    @staticmethod
    def create(address: str, topic: str, partitions: int, config: dict | None = None) -> None:
        from broker.client.admin import AdminClient
        with AdminClient(address) as admin:
            admin.create_topic(topic, partitions, config=config) if config else \
                admin.create_topic(topic, partitions)

    def stop(self, b) -> None:
        b.stop(timeout=60)
        subprocess.run(["rm", "-rf", b.data_dir])

    # ---------------------------------------------------------------- parts

    def part_partitions(self) -> list[dict]:
        out = []
        for p in self.a.partition_counts:
            b = self.broker(metrics_port=0)
            try:
                self.create(b.address, "spread", p)
                u0, s0 = proc_cpu_times(b.proc.pid)
                r = run_worker("produce", {"bootstrap": b.address, "topic": "spread",
                                           "n": self.a.n, "partitions": list(range(p))})
                u1, s1 = proc_cpu_times(b.proc.pid)
                cpu = (u1 - u0) + (s1 - s0)
                r.update(partitions=p, broker_cpu_s_per_million=cpu / (r["n"] / 1e6),
                         fsyncs=broker_counter(b.metrics_port, "samsa_flushes_total"),
                         broker_system_share=(s1 - s0) / cpu if cpu else 0.0,
                         client_cpu_s_per_million=r["client_cpu_s"] / (r["n"] / 1e6),
                         broker_rss_mib=rss_mib(b.proc.pid))
                # idle: after the checkpoint that follows the burst (every 10 s by default)
                time.sleep(self.a.settle_seconds)
                r["idle_cpu_percent"] = cpu_over(b.proc.pid, self.a.idle_seconds)
                log(f"  {p:5d} partitions: {r['msgs_per_s']:>11,.0f} msg/s, {r['fsyncs']:,.0f} "
                    f"fsyncs, broker "
                    f"{r['broker_cpu_s_per_million']:.2f} CPU s per million, RSS "
                    f"{r['broker_rss_mib']:.0f} MiB, idle CPU {r['idle_cpu_percent']:.1f}%")
                out.append(r)
            finally:
                self.stop(b)
        return out

    def part_clients(self) -> dict:
        producers, consumers = [], []
        for k in self.a.client_counts:
            b = self.broker()
            try:
                self.create(b.address, "many", 8)
                per = self.a.n // k
                t0 = time.perf_counter()
                cpu0 = proc_cpu_seconds(b.proc.pid)
                rs = run_parallel("produce", [{"bootstrap": b.address, "topic": "many",
                                               "n": per, "partitions": [i]} for i in range(k)])
                wall = max(r["all_in_broker_s"] for r in rs)
                total = sum(r["n"] for r in rs)
                row = {"clients": k, "msgs_per_s": total / wall, "wall_s": wall,
                       "broker_cpu_s": proc_cpu_seconds(b.proc.pid) - cpu0,
                       "elapsed_s": time.perf_counter() - t0,
                       "errors": [r["error"] for r in rs if "error" in r]}
                producers.append(row)
                log(f"  {k} producers: {row['msgs_per_s']:>11,.0f} msg/s in total")
                cpu0 = proc_cpu_seconds(b.proc.pid)
                rs = run_parallel("consume", [{"bootstrap": b.address, "topic": "many",
                                               "n": per // 50 * 50, "partitions": [i]}
                                              for i in range(k)])
                wall = max(r["elapsed_s"] for r in rs)
                row = {"clients": k, "msgs_per_s": sum(r["n"] for r in rs) / wall,
                       "wall_s": wall, "broker_cpu_s": proc_cpu_seconds(b.proc.pid) - cpu0,
                       "errors": [r["error"] for r in rs if "error" in r]}
                consumers.append(row)
                log(f"  {k} consumers: {row['msgs_per_s']:>11,.0f} msg/s in total")
            finally:
                self.stop(b)
        return {"producers": producers, "consumers": consumers}

    def part_idle(self) -> list[dict]:
        out = []
        b = self.broker(metrics_port=0)
        try:
            self.create(b.address, "quiet", 1)
            for k in self.a.idle_counts:
                proc = subprocess.Popen(worker_cmd("idle", {"bootstrap": b.address,
                                                            "topic": "quiet", "count": k}),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, cwd=ROOT)
                try:
                    line = proc.stdout.readline()
                    if line.strip() != "READY":
                        raise RuntimeError(f"idle consumers did not start: {line!r}")
                    time.sleep(1.0)         # let every consumer be in its long poll
                    fetches0 = fetch_requests(b.metrics_port)
                    cpu = cpu_over(b.proc.pid, self.a.idle_seconds)
                    fetches = fetch_requests(b.metrics_port) - fetches0
                    client_cpu0 = proc_cpu_seconds(proc.pid)
                    proc.stdin.close()
                    result = parse_result("idle", proc.wait(60), proc.stdout.read())
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                row = {"consumers": k, "broker_cpu_percent": cpu,
                       "polls_per_s": fetches / self.a.idle_seconds,
                       "client_polls": result.get("polls", 0), "client_cpu_s": client_cpu0}
                out.append(row)
                log(f"  {k:4d} idle consumers: broker CPU {cpu:.1f}% of a core "
                    f"(~{row['polls_per_s']:,.0f} empty long polls answered per s)")
        finally:
            self.stop(b)
        return out

    def part_segments(self) -> list[dict]:
        out = []
        n = self.a.segment_messages
        for segments in (1, self.a.segments):
            seg_bytes = 1 << 30 if segments == 1 else max(4096, n * MESSAGE_BYTES // segments)
            b = self.broker()
            try:
                self.create(b.address, "lookups", 1, {"segment.bytes": str(seg_bytes)})
                r = run_worker("produce", {"bootstrap": b.address, "topic": "lookups", "n": n,
                                           "partitions": [0]})
                if "error" in r:
                    raise RuntimeError(r["error"])
                files = len([f for f in os.listdir(os.path.join(
                    b.data_dir, "topics", "lookups", "0")) if f.endswith(".log")])
                look = run_worker("lookups", {"bootstrap": b.address, "topic": "lookups",
                                              "messages": r["n"], "seconds": 5})
                b.stop(timeout=60)
                t0 = time.perf_counter()
                b.start(timeout=300)
                restart = time.perf_counter() - t0
                row = {"segments": files, "messages": r["n"], "restart_s": restart, **look}
                out.append(row)
                log(f"  {files:6d} segments: {look.get('fetches_per_s', 0):,.0f} random fetches "
                    f"per s ({look.get('us_per_fetch', 0):.0f} us each); clean restart "
                    f"{restart:.2f} s")
            finally:
                self.stop(b)
        return out

    def part_recovery(self) -> list[dict]:
        out = []
        settings = {"checkpoint_interval_ms": 3_600_000}
        for mb in self.a.recovery_mb:
            b = self.broker(settings)
            try:
                self.create(b.address, "crash", 1)
                n = int(mb * 1e6 / MESSAGE_BYTES) // 50 * 50
                r = run_worker("produce", {"bootstrap": b.address, "topic": "crash", "n": n,
                                           "partitions": [0]})
                if "error" in r:
                    raise RuntimeError(r["error"])
                b.kill()
                t0 = time.perf_counter()
                b.start(timeout=600)
                restart = time.perf_counter() - t0
                from broker.client.admin import AdminClient
                with AdminClient(b.address) as admin:
                    kept = admin.latest_offset("crash", 0)
                row = {"unflushed_mb": n * MESSAGE_BYTES / 1e6, "restart_s": restart,
                       "bytes_kept": kept, "bytes_written": n * MESSAGE_BYTES}
                out.append(row)
                log(f"  {row['unflushed_mb']:7.0f} MB past the recovery point: restart after "
                    f"kill -9 in {restart:.2f} s ({kept:,} of {n * MESSAGE_BYTES:,} bytes kept)")
            finally:
                self.stop(b)
        return out


# ====================================================================== report

def plot(result: dict, prefix: str) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    made = []
    parts = result["parts"]

    def save(fig, name):
        path = f"{prefix}-{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)
        made.append(os.path.relpath(path, HERE))

    if "partitions" in parts:
        rows = parts["partitions"]
        fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
        xs = [r["partitions"] for r in rows]
        ax[0].plot(xs, [r["msgs_per_s"] / 1e6 for r in rows], "o-")
        ax[0].set(xscale="log", xlabel="partitions (one producer)", ylabel="M msg/s",
                  title="produce throughput", ylim=(0, None))
        ax[1].plot(xs, [r["broker_rss_mib"] for r in rows], "o-", label="RSS MiB")
        ax[1].plot(xs, [100 * r["broker_cpu_s_per_million"] for r in rows], "s-",
                   label="CPU cs per M msgs")
        ax[1].set(xscale="log", xlabel="partitions", title="broker cost", ylim=(0, None))
        ax[1].legend()
        save(fig, "partitions")
    if "clients" in parts:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for key in ("producers", "consumers"):
            rows = parts["clients"][key]
            ax.plot([r["clients"] for r in rows], [r["msgs_per_s"] / 1e6 for r in rows], "o-",
                    label=key)
        ax.set(xlabel="client processes in parallel", ylabel="M msg/s (total)",
               title="parallel clients, 2 cores", ylim=(0, None))
        ax.legend()
        save(fig, "clients")
    if "idle" in parts:
        rows = parts["idle"]
        fig, ax = plt.subplots(figsize=(5, 3.6))
        ax.plot([r["consumers"] for r in rows], [r["broker_cpu_percent"] for r in rows], "o-")
        ax.set(xscale="log", xlabel="idle long-polling consumers", ylabel="broker CPU %",
               title="idle consumers", ylim=(0, None))
        save(fig, "idle")
    if "recovery" in parts:
        rows = parts["recovery"]
        fig, ax = plt.subplots(figsize=(5, 3.6))
        ax.plot([r["unflushed_mb"] for r in rows], [r["restart_s"] for r in rows], "o-")
        ax.set(xlabel="MB past the recovery point", ylabel="restart s after kill -9",
               title="recovery", ylim=(0, None))
        save(fig, "recovery")
    return made


def render(result: dict) -> str:
    m, parts = result["machine"], result["parts"]
    lines = [f"## Scale benchmark ({result['started'][:10]}, `make bench-scale`)", "",
             f"**Machine:** {m.get('nproc')} cores ({m.get('cpu_model', '?')}), "
             f"{m.get('mem_total_gib', '?')} GiB RAM; git {result['code']['head']}. "
             "**Method:** `bench/scale.py` (its docstring): a fresh broker process per part, "
             "clients in other processes, default settings; single runs (each point is one "
             "measurement).", ""]
    if "partitions" in parts:
        lines += ["| Partitions (one producer, batch 50) | msg/s | broker CPU s per M msgs "
                  "(system share) | fsyncs | producer CPU s per M | broker RSS MiB | broker CPU "
                  "idle (after its checkpoint) |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['partitions']:,} | {r['msgs_per_s']:,.0f} | "
                  f"{r['broker_cpu_s_per_million']:.2f} ({r['broker_system_share']:.0%}) | "
                  f"{r['fsyncs']:,.0f} | {r['client_cpu_s_per_million']:.2f} | {r['broker_rss_mib']:.0f} | "
                  f"{r['idle_cpu_percent']:.1f} % |" for r in parts["partitions"]]
        lines.append("")
    if "clients" in parts:
        lines += ["| Client processes in parallel | producers, msg/s total | consumers, msg/s "
                  "total |", "|---|---|---|"]
        for p, c in zip(parts["clients"]["producers"], parts["clients"]["consumers"]):
            lines.append(f"| {p['clients']} | {p['msgs_per_s']:,.0f} | {c['msgs_per_s']:,.0f} |")
        lines.append("")
    if "idle" in parts:
        lines += ["| Idle long-polling consumers | broker CPU (% of a core) | empty polls "
                  "answered per s |", "|---|---|---|"]
        lines += [f"| {r['consumers']:,} | {r['broker_cpu_percent']:.1f} % | "
                  f"{r['polls_per_s']:,.0f} |" for r in parts["idle"]]
        lines.append("")
    if "segments" in parts:
        lines += ["| Segments in the partition | random 1-message fetches per s | us per fetch "
                  "| clean restart s |", "|---|---|---|---|"]
        lines += [f"| {r['segments']:,} | {r.get('fetches_per_s', 0):,.0f} | "
                  f"{r.get('us_per_fetch', 0):.0f} | {r['restart_s']:.2f} |"
                  for r in parts["segments"]]
        lines.append("")
    if "recovery" in parts:
        lines += ["| MB past the recovery point at kill -9 | restart s | bytes kept |",
                  "|---|---|---|"]
        lines += [f"| {r['unflushed_mb']:,.0f} | {r['restart_s']:.2f} | "
                  f"{r['bytes_kept']:,} of {r['bytes_written']:,} |" for r in parts["recovery"]]
        lines.append("")
    if result.get("plots"):
        lines.append("Plots: " + ", ".join(f"`bench/{p}`" for p in result["plots"]) + ".")
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS))
    p.add_argument("--quick", action="store_true", help="small sizes; RESULTS.md left alone")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return a
    a.parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    bad = set(a.parts) - set(PARTS)
    if bad:
        p.error(f"unknown parts: {', '.join(sorted(bad))}")
    q = a.quick
    a.n = 200_000 if q else 2_000_000
    a.partition_counts = [1, 10, 100] if q else [1, 10, 100, 1000]
    a.client_counts = [1, 2] if q else [1, 2, 4, 8]
    a.idle_counts = [1, 10] if q else [1, 10, 100, 500]
    a.idle_seconds = 2.0 if q else 10.0
    a.settle_seconds = 1.0 if q else 11.0
    a.segments = 1000 if q else 10_000
    a.segment_messages = 100_000 if q else 1_000_000
    a.recovery_mb = [10, 50] if q else [10, 100, 500, 2000]
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.worker:
        kind, params = a.worker
        print("RESULT " + json.dumps(WORKERS[kind](json.loads(params))), flush=True)
        return 0
    started = dt.datetime.now(dt.timezone.utc)
    scale = Scale(a)
    result = {"started": started.isoformat(timespec="seconds"), "machine": machine_info(),
              "code": git_state(), "quick": a.quick, "parts": {}}
    try:
        for part in a.parts:
            log(f"part {part} ...")
            result["parts"][part] = getattr(scale, f"part_{part}")()
    finally:
        subprocess.run(["rm", "-rf", scale.workdir])
    name = f"scale-{started.date().isoformat()}{'-quick' if a.quick else ''}"
    earlier = os.path.join(HERE, "results", f"{name}.json")
    if set(a.parts) != set(PARTS) and os.path.exists(earlier):
        with open(earlier) as f:        # a partial run: keep the other parts of today's run
            kept = json.load(f).get("parts", {})
        result["parts"] = {**{k: v for k, v in kept.items() if k not in result["parts"]},
                           **result["parts"]}
        result["parts"] = {k: result["parts"][k] for k in PARTS if k in result["parts"]}
    if not a.no_write:
        result["plots"] = plot(result, os.path.join(HERE, "results", name))
    save_results(name, result, render(result), MARK_START, MARK_END,
                 write_md=not (a.quick or a.no_write))
    return 0


if __name__ == "__main__":
    sys.exit(main())
