"""Samsa broker benchmark: the Kafka paper's (2011) single-broker workload.

    .venv/bin/python -m bench.run            # full run (several minutes), from the checkout
    .venv/bin/python -m bench.run --quick    # smoke run (~1 min, no RESULTS.md update)
    .venv/bin/python -m bench.run --help

Figures (each: --runs runs, median reported, min/max kept), 200-byte random
values, one partition, clients in separate processes (this module re-runs
itself with ``--worker``). Sustained by default: one broker process
(``broker.harness.BrokerProcess``) for every test, first filled with
--prefill-gb (4 GB) in 4 topics; every test writes its own new topic
(--prefill-gb 0: a fresh broker per test, as before issue 14):

  produce batch 50 / batch 1   acks=none; throughput = N / (first send -> the
                               broker's latest (flushed) offset == N*222 bytes);
                               N / (first send -> flush() returned) kept too.
                               These send to partition=0 (figures comparable
                               with earlier runs); each is followed, on the
                               same broker, by the common call, send() with
                               no partition (the producer picks it), on a new
                               one-partition topic (keys *_common: the A/B
                               of naming the partition or not), and batch 1
                               also on a topic of the broker's default
                               partition count (produce_batch1_common_multi)
  consume                      drain the batch-50 run's N messages from earliest,
                               200 KB fetches, CRC checks on; msg/s and MB/s;
                               broker CPU seconds (utime+stime) per GB consumed
  latency                      paced 10,000 msg/s for 10 s, batch_size=1,
                               linger_ms=0, acks=none, default broker flush
                               settings; consumer in its own process records
                               now - send time (in the value); p50/p99/max

Writes bench/results/broker-<UTC date>.json (raw runs, machine info) and the
section between the broker-bench markers in bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

from bench.common import (DISTINCT_VALUES, FETCH_BYTES, HERE, MESSAGE_BYTES, ROOT, VALUE_SIZE,
                          Window, git_state, log, machine_info, parse_result, percentile,
                          random_values, summarize, wait_for_quiet, write_section)
from broker.config import BrokerConfig

TOPIC = "bench"
DEFAULT_PARTITIONS = BrokerConfig().default_partitions   # an auto-created topic's count
# raw/summary keys of the produce figures, and how the log names them
PRODUCE_LABELS = {
    "produce_batch50": "produce batch 50",
    "produce_batch1": "produce batch 1",
    "produce_batch50_send": "produce batch 50, send() per message",
    "produce_batch50_common": "produce batch 50, no partition named",
    "produce_batch1_common": "produce batch 1, no partition named",
    "produce_batch1_common_multi": f"produce batch 1, no partition named, "
                                   f"{DEFAULT_PARTITIONS} partitions",
}
PRODUCE_KEYS = tuple(PRODUCE_LABELS)
TESTS = ("produce50", "consume", "produce1", "latency", "produce50send", "produce50_common",
         "produce1_common", "produce1_common_multi")

TARGETS = {     # figure: (target, the paper's figure); issue 14's, sustained
    "produce_batch50": (2_000_000, 400_000),
    "produce_batch1": (350_000, 50_000),
    "consume": (4_000_000, 22_000),
}
MARK_START = "<!-- broker-bench:start -->"
MARK_END = "<!-- broker-bench:end -->"


# ====================================================================== helpers


# ====================================================================== workers
# Each runs in its own process and prints one line "RESULT <json>" on stdout.

def worker_produce(p: dict) -> dict:
    """``partition``: 0 (default) names it in every call; None leaves it to
    the producer (the common call). ``partitions``: the topic's count, whose
    latest offsets together must reach the bytes sent."""
    from broker.client.admin import AdminClient
    from broker.client.producer import Producer, ProducerConfig
    n, topic = p["n"], p["topic"]
    partition = p.get("partition", 0)
    named = {} if partition is None else {"partition": partition}
    values = random_values()
    mask = DISTINCT_VALUES - 1
    expected_end = n * MESSAGE_BYTES
    admin = AdminClient(p["bootstrap"])
    partitions = range(p.get("partitions", 1))

    def latest_offset() -> int:
        return sum(admin.latest_offset(topic, q) for q in partitions)
    start_offset = latest_offset()
    expected_end += start_offset
    producer = Producer(ProducerConfig(bootstrap=p["bootstrap"], acks="none",
                                       batch_size=p["batch_size"], linger_ms=p["linger_ms"]))
    producer.conn.connect()
    api = p.get("api", "send")
    if api == "send_many":      # the application hands over batch_size messages per call
        bs = p["batch_size"]
        chunks = [[values[(k * bs + j) & mask] for j in range(bs)] for k in range(DISTINCT_VALUES)]
        send_many = producer.send_many
    send = producer.send
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    if api == "send_many":
        for k in range(n // bs):
            send_many(topic, chunks[k & mask], **named)
        for i in range(n - n % bs, n):
            send(topic, values[i & mask], **named)
    elif named:
        for i in range(n):
            send(topic, values[i & mask], partition=partition)
    else:
        for i in range(n):
            send(topic, values[i & mask])
    t_sent = time.perf_counter()
    producer.flush()
    t_flush = time.perf_counter()
    cpu_flush = time.process_time()
    deadline = t_flush + p.get("timeout_s", 300)
    latest = latest_offset()
    while latest < expected_end and time.perf_counter() < deadline:
        time.sleep(0.002)
        latest = latest_offset()
    t_all = time.perf_counter()
    failed = producer.failed_batches
    producer.close()
    admin.close()
    out = {"n": n, "batch_size": p["batch_size"], "linger_ms": p["linger_ms"], "api": api,
           "partition": partition, "partitions": len(partitions),
           "send_loop_s": t_sent - t0, "flush_s": t_flush - t0, "all_in_broker_s": t_all - t0,
           "msgs_per_s_flush": n / (t_flush - t0), "client_cpu_s": cpu_flush - cpu0,
           "latest_offset": latest, "expected_offset": expected_end, "failed_batches": failed}
    if latest == expected_end:
        out["msgs_per_s"] = n / (t_all - t0)
        out["mb_per_s"] = n * MESSAGE_BYTES / (t_all - t0) / 1e6
    else:
        out["error"] = f"broker has {latest} bytes, expected {expected_end}"
    return out


def worker_consume(p: dict) -> dict:
    from broker.client.consumer import Consumer, ConsumerConfig
    n, tp = p["n"], (p["topic"], 0)
    consumer = Consumer(ConsumerConfig(bootstrap=p["bootstrap"], fetch_max_bytes=p["fetch_bytes"],
                                       check_crcs=True))
    consumer.assign([tp], start="earliest")
    start = consumer.position(tp)
    count = 0
    error = None
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    while count < n:
        msgs = consumer.poll(timeout_ms=10_000)
        if not msgs:
            error = f"no message for 10 s after {count}"
            break
        count += len(msgs)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    nbytes = consumer.position(tp) - start
    consumer.close()
    out = {"n": count, "elapsed_s": elapsed, "bytes": nbytes, "msgs_per_s": count / elapsed,
           "mb_per_s": nbytes / elapsed / 1e6, "client_cpu_s": cpu,
           "fetch_bytes": p["fetch_bytes"]}
    if error:
        out["error"] = error
    return out


def worker_latency_consumer(p: dict) -> dict:
    from broker.client.consumer import Consumer, ConsumerConfig
    n, tp = p["n"], (p["topic"], 0)
    consumer = Consumer(ConsumerConfig(bootstrap=p["bootstrap"], check_crcs=True))
    consumer.assign([tp], start="latest")
    unpack = struct.Struct(">q").unpack_from
    lat_ns: list[int] = []
    append = lat_ns.append
    print("READY", flush=True)
    idle_limit = p.get("idle_timeout_ms", 15_000)
    while len(lat_ns) < n:
        msgs = consumer.poll(timeout_ms=idle_limit)
        now = time.time_ns()
        if not msgs:
            break
        for m in msgs:
            append(now - unpack(m.value)[0])
    consumer.close()
    lat_ms = sorted(x / 1e6 for x in lat_ns)
    out = {"received": len(lat_ms), "expected": n}
    if lat_ms:
        out.update({"p50_ms": percentile(lat_ms, 50), "p90_ms": percentile(lat_ms, 90),
                    "p99_ms": percentile(lat_ms, 99), "p999_ms": percentile(lat_ms, 99.9),
                    "max_ms": lat_ms[-1], "min_ms": lat_ms[0],
                    "mean_ms": sum(lat_ms) / len(lat_ms)})
    if len(lat_ms) < n:
        out["error"] = f"received {len(lat_ms)} of {n} messages"
    return out


def worker_latency_producer(p: dict) -> dict:
    from broker.client.producer import Producer, ProducerConfig
    rate, n, topic = p["rate"], p["n"], p["topic"]
    pads = random_values(size=VALUE_SIZE - 8)
    mask = DISTINCT_VALUES - 1
    producer = Producer(ProducerConfig(bootstrap=p["bootstrap"], acks="none",
                                       batch_size=p["batch_size"], linger_ms=p["linger_ms"]))
    producer.conn.connect()
    send, pack, now_ns, clock, sleep = (producer.send, struct.Struct(">q").pack, time.time_ns,
                                        time.perf_counter, time.sleep)
    interval = 1.0 / rate
    behind_max = 0.0
    t0 = clock()
    for i in range(n):
        target = t0 + i * interval
        delay = target - clock()
        if delay > 0:
            sleep(delay)
        elif -delay > behind_max:
            behind_max = -delay
        send(topic, pack(now_ns()) + pads[i & mask], partition=0)
    elapsed = clock() - t0
    producer.flush()
    producer.close()
    return {"n": n, "rate_target": rate, "rate_achieved": n / elapsed, "elapsed_s": elapsed,
            "max_behind_schedule_ms": behind_max * 1000, "batch_size": p["batch_size"],
            "linger_ms": p["linger_ms"]}


WORKERS = {"produce": worker_produce, "consume": worker_consume,
           "latency_consumer": worker_latency_consumer,
           "latency_producer": worker_latency_producer}


def worker_main(kind: str, params: str) -> int:
    result = WORKERS[kind](json.loads(params))
    t = os.times()
    result["client_cpu_total_s"] = t.user + t.system    # the whole worker, start-up included
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# ====================================================================== driver

class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.profile_dir = args.profile
        self.code: dict = {}
        self.held = None            # the broker every test shares when sustained
        self.held_dir: str | None = None
        self.prefill: dict = {}

    # ----------------------------------------------------------- processes

    def worker_cmd(self, kind: str, params: dict) -> list[str]:
        return [sys.executable, "-m", "bench.run", "--worker", kind, json.dumps(params)]

    def start_profiler(self, pid: int, name: str) -> subprocess.Popen | None:
        if not self.profile_dir:
            return None
        os.makedirs(self.profile_dir, exist_ok=True)
        pyspy = os.path.join(os.path.dirname(sys.executable), "py-spy")
        base = os.path.join(self.profile_dir, name)
        cmd = [pyspy, "record", "--pid", str(pid), "--rate", "250", "--nonblocking",
               "--format", "raw", "-o", base + ".txt"]
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    @staticmethod
    def stop_profiler(prof: subprocess.Popen | None) -> None:
        if prof is None:
            return
        try:
            prof.send_signal(2)     # SIGINT: py-spy writes its output and exits
            prof.wait(30)
        except subprocess.TimeoutExpired:
            prof.kill()
            prof.wait()

    def run_worker(self, kind: str, params: dict, profile_name: str | None = None,
                   timeout: float = 900) -> dict:
        proc = subprocess.Popen(self.worker_cmd(kind, params), stdout=subprocess.PIPE, text=True,
                                cwd=ROOT)
        prof = self.start_profiler(proc.pid, profile_name) if profile_name else None
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            self.stop_profiler(prof)
            return {"error": f"{kind} worker timed out after {timeout} s"}
        except BaseException:       # interrupted: leave no worker behind
            proc.kill()
            proc.wait()
            self.stop_profiler(prof)
            raise
        self.stop_profiler(prof)
        return parse_result(kind, proc.returncode, out)

    def broker(self, workdir: str, name: str, metrics_port: int = -1):
        from broker.harness import BrokerProcess
        settings = dict(self.args.set or [])
        b = BrokerProcess(os.path.join(workdir, name), settings=settings,
                          metrics_port=metrics_port)
        self.code = git_state()     # broker/ may be edited while the benchmark runs
        b.start()
        return b

    def acquire(self, test: str, run: int, metrics_port: int = -1, create: bool = True):
        """The broker for one test and the topic (new, one partition, unless
        not ``create``d) it writes: the held broker when the run is sustained
        (--prefill-gb > 0), else a fresh broker in a new directory. Give
        both to ``release``."""
        topic = f"{test}-run{run}"
        if self.held is not None:
            b, workdir = self.held, None
        else:
            workdir = tempfile.mkdtemp(prefix="samsa-bench-")
            b = self.broker(workdir, "broker", metrics_port=metrics_port)
        if create:
            create_topic(b.address, topic)
        return b, workdir, topic

    def release(self, b, workdir: str | None) -> None:
        if workdir is not None:
            self.cleanup(b, workdir)

    def start_held_broker(self) -> None:
        """One broker for every test of the run, first filled with
        --prefill-gb of batch-50 data in --prefill-topics topics: the figures
        are then those of a broker that holds several GB, as in production
        (a fresh broker's page cache and memory are not what a long-running
        one sees; bench/RESULTS.md, issue 14)."""
        a = self.args
        self.held_dir = tempfile.mkdtemp(prefix="samsa-bench-held-")
        self.held = self.broker(self.held_dir, "broker", metrics_port=0)
        per_topic = int(a.prefill_gb * 1e9 / MESSAGE_BYTES / a.prefill_topics)
        t0 = time.perf_counter()
        for i in range(a.prefill_topics):
            topic = f"prefill-{i}"
            create_topic(self.held.address, topic)
            r = self.run_worker("produce", {"bootstrap": self.held.address, "topic": topic,
                                            "n": per_topic, "batch_size": 50,
                                            "linger_ms": a.linger_ms, "api": "send_many"})
            if "error" in r:
                raise RuntimeError(f"pre-filling {topic} failed: {r['error']}")
            log(f"  pre-filled {topic}: {per_topic:,} messages "
                f"({per_topic * MESSAGE_BYTES / 1e9:.2f} GB) at {r['msgs_per_s']:,.0f} msg/s")
        self.prefill = {"bytes": per_topic * MESSAGE_BYTES * a.prefill_topics,
                        "topics": a.prefill_topics, "seconds": time.perf_counter() - t0}

    # ----------------------------------------------------------- tests

    def run_produce_consume(self, run: int) -> tuple[dict, dict]:
        """A fresh broker: the batch-50 produce test, then the consume test
        draining what it wrote."""
        a = self.args
        b, workdir, topic = self.acquire("produce50", run)
        try:
            quiet = wait_for_quiet(a.wait_quiet)
            prof = self.start_profiler(b.proc.pid, f"broker-produce50-run{run}")
            w = Window(b.proc.pid)
            prod = self.run_worker("produce", {"bootstrap": b.address, "topic": topic,
                                               "n": a.n_batch50, "batch_size": 50,
                                               "linger_ms": a.linger_ms,
                                               "api": a.producer_api},
                                   profile_name=f"client-produce50-run{run}")
            w.close(prod, prod.get("client_cpu_total_s"))
            prod.update(quiet)
            self.stop_profiler(prof)
            if "error" in prod:
                return prod, {"error": "skipped: the produce run failed"}
            quiet = wait_for_quiet(a.wait_quiet)
            prof = self.start_profiler(b.proc.pid, f"broker-consume-run{run}")
            w = Window(b.proc.pid)
            cons = self.run_worker("consume", {"bootstrap": b.address, "topic": topic,
                                               "n": a.n_batch50, "fetch_bytes": FETCH_BYTES},
                                   profile_name=f"client-consume-run{run}")
            cpu = w.close(cons, cons.get("client_cpu_total_s"))
            cons.update(quiet)
            self.stop_profiler(prof)
            if cons.get("bytes"):
                cons["broker_cpu_s_per_gb"] = cpu / (cons["bytes"] / 1e9)
            batch50 = {"n": a.n_batch50, "batch_size": 50, "linger_ms": a.linger_ms}
            if "produce50send" in a.tests and a.producer_api != "send":
                # the same batch-50 test with one send() call per message, for comparison
                prod["per_message_send"] = self.produce_on(
                    b, f"produce50send-run{run}", {**batch50, "api": "send"})
            if "produce50_common" in a.tests:
                # the same, the producer choosing the partition (of one)
                prod["common_call"] = self.produce_on(
                    b, f"produce50common-run{run}",
                    {**batch50, "api": a.producer_api, "partition": None})
            return prod, cons
        finally:
            self.release(b, workdir)

    def produce_on(self, b, topic: str, params: dict, partitions: int = 1,
                   profile_name: str | None = None) -> dict:
        """One produce worker on broker ``b`` into a new topic of
        ``partitions`` partitions, after waiting for the machine to be quiet;
        its figures with the broker's CPU over the test window."""
        create_topic(b.address, topic, partitions)
        quiet = wait_for_quiet(self.args.wait_quiet)
        prof = self.start_profiler(b.proc.pid, f"broker-{profile_name}") if profile_name \
            else None
        w = Window(b.proc.pid)
        result = self.run_worker("produce", {"bootstrap": b.address, "topic": topic,
                                             "partitions": partitions, **params},
                                 profile_name=profile_name and f"client-{profile_name}")
        w.close(result, result.get("client_cpu_total_s"))
        result.update(quiet)
        self.stop_profiler(prof)
        return result

    def run_produce1(self, run: int) -> dict[str, dict]:
        """Batch 1 with partition=0 (``produce_batch1``), and on the same
        broker the common call, no partition, into a one-partition topic
        (``produce_batch1_common``) and into one of the broker's default
        partition count (``produce_batch1_common_multi``), as --tests asks.
        The order alternates with the run, so neither side always goes
        first on a broker holding less."""
        a = self.args
        b, workdir, _topic = self.acquire("produce1", run, create=False)
        batch1 = {"n": a.n_batch1, "batch_size": 1, "linger_ms": 0, "api": "send"}
        tests = []
        if "produce1" in a.tests:
            tests.append(("produce_batch1", lambda: self.produce_on(
                b, f"produce1-run{run}", batch1, profile_name=f"produce1-run{run}")))
        if "produce1_common" in a.tests:
            tests.append(("produce_batch1_common", lambda: self.produce_on(
                b, f"produce1common-run{run}", {**batch1, "partition": None})))
        if "produce1_common_multi" in a.tests:
            tests.append(("produce_batch1_common_multi", lambda: self.produce_on(
                b, f"produce1multi-run{run}", {**batch1, "partition": None},
                partitions=DEFAULT_PARTITIONS)))
        if run % 2 == 0:
            tests.reverse()
        try:
            return {key: test() for key, test in tests}
        finally:
            self.release(b, workdir)

    def run_latency(self, run: int) -> dict:
        a = self.args
        n = int(a.latency_rate * a.latency_seconds)
        b, workdir, topic = self.acquire("latency", run, metrics_port=0)   # fsync histogram
        cons_proc = None
        try:
            flushes_before = flush_metrics(b.metrics_port)
            common = {"bootstrap": b.address, "topic": topic, "n": n}
            quiet = wait_for_quiet(a.wait_quiet)
            cons_proc = subprocess.Popen(self.worker_cmd("latency_consumer", common),
                                         stdout=subprocess.PIPE, text=True)
            line = cons_proc.stdout.readline()
            if line.strip() != "READY":
                return {"error": f"latency consumer did not start: {line!r}"}
            prof = self.start_profiler(b.proc.pid, f"broker-latency-run{run}")
            w = Window(b.proc.pid)
            prod = self.run_worker("latency_producer",
                                   {**common, "rate": a.latency_rate, "batch_size": 1,
                                    "linger_ms": 0}, profile_name=f"client-latency-run{run}")
            out, _ = cons_proc.communicate(timeout=120)
            self.stop_profiler(prof)
            cons = parse_result("latency_consumer", cons_proc.returncode, out)
            cons_proc = None
            result = {**cons, "producer": prod, **quiet}
            broker_cpu = w.close(result)
            result["broker_cpu_percent"] = 100 * broker_cpu / result["window_s"]
            result["broker_flushes"] = flush_delta(flushes_before, flush_metrics(b.metrics_port))
            if "error" in prod:
                result["error"] = "producer: " + prod["error"]
            return result
        finally:
            if cons_proc is not None:
                cons_proc.kill()
                cons_proc.wait()
            self.release(b, workdir)

    def cleanup(self, b, workdir: str) -> None:
        try:
            b.stop(timeout=60)
        except Exception as exc:    # noqa: BLE001 - a benchmark must clean up regardless
            log(f"broker did not stop cleanly ({exc}); killed")
            b.kill()
        if self.args.keep_logs:
            os.makedirs(self.args.keep_logs, exist_ok=True)
            shutil.copy(b.log_path, os.path.join(self.args.keep_logs,
                                                 f"broker-{int(time.time())}.log"))
        shutil.rmtree(workdir, ignore_errors=True)

    # ----------------------------------------------------------- the whole run

    def run(self) -> dict:
        a = self.args
        tests = a.tests
        raw: dict[str, list] = {k: [] for k in ("consume", "latency", *PRODUCE_KEYS)}

        def record(key: str, run: int, result: dict) -> None:
            result["run"], result["code"] = run, self.code
            raw[key].append(result)
        started = dt.datetime.now(dt.timezone.utc)
        if a.prefill_gb > 0:
            log(f"sustained: one broker for every test, pre-filled with {a.prefill_gb:g} GB in "
                f"{a.prefill_topics} topics ...")
            self.start_held_broker()
        try:
            self.run_tests(tests, record)
        finally:
            if self.held is not None:
                self.cleanup(self.held, self.held_dir)
        finished = dt.datetime.now(dt.timezone.utc)
        return {"started": started.isoformat(timespec="seconds"),
                "finished": finished.isoformat(timespec="seconds"),
                "quick": a.quick, "config": config_of(a), "prefill": self.prefill, "raw": raw,
                "summary": summary_of(raw)}

    def run_tests(self, tests, record) -> None:
        a = self.args
        for run in range(1, a.runs + 1):
            if "produce50" in tests or "consume" in tests:
                log(f"run {run}/{a.runs}: produce batch=50 acks=none, N={a.n_batch50:,} ...")
                prod, cons = self.run_produce_consume(run)
                per_msg = prod.pop("per_message_send", None)
                common = prod.pop("common_call", None)
                record("produce_batch50", run, prod)
                log("  produce batch 50: " + fmt_produce(prod))
                if per_msg is not None:
                    record("produce_batch50_send", run, per_msg)
                    log("  produce batch 50, send() per message: " + fmt_produce(per_msg))
                if common is not None:
                    record("produce_batch50_common", run, common)
                    log("  produce batch 50, no partition named: " + fmt_produce(common))
                record("consume", run, cons)
                log("  consume (200 KB fetches, CRC on): " + fmt_consume(cons))
            if tests & {"produce1", "produce1_common", "produce1_common_multi"}:
                log(f"run {run}/{a.runs}: produce batch=1 linger=0 acks=none, "
                    f"N={a.n_batch1:,} ...")
                for key, prod in self.run_produce1(run).items():
                    record(key, run, prod)
                    log(f"  {PRODUCE_LABELS[key]}: " + fmt_produce(prod))
            if "latency" in tests:
                log(f"run {run}/{a.runs}: end-to-end latency at {a.latency_rate:,} msg/s for "
                    f"{a.latency_seconds} s ...")
                lat = self.run_latency(run)
                record("latency", run, lat)
                log("  latency: " + fmt_latency(lat))


def flush_metrics(port: int | None) -> dict:
    """The broker's fsync count and latency histogram (Prometheus text)."""
    import urllib.request
    if not port:
        return {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    except OSError as exc:
        return {"error": str(exc)}
    out: dict = {"buckets": {}}
    for line in text.splitlines():
        if line.startswith("samsa_flush_seconds_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out["buckets"][le] = float(line.rsplit(" ", 1)[1])
        elif line.startswith(("samsa_flush_seconds_sum", "samsa_flush_seconds_count",
                              "samsa_flushes_total")):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def create_topic(address: str, topic: str = TOPIC, partitions: int = 1) -> None:
    from broker.client.admin import AdminClient
    with AdminClient(address) as admin:
        admin.create_topic(topic, partitions)


def flush_delta(before: dict, after: dict) -> dict:
    """The fsyncs between two flush_metrics() readings of one broker."""
    if "error" in before or "error" in after:
        return after
    out = {k: v - before.get(k, 0) for k, v in after.items() if k != "buckets"}
    out["buckets"] = {le: n - before.get("buckets", {}).get(le, 0)
                      for le, n in after.get("buckets", {}).items()}
    return out


def config_of(a: argparse.Namespace) -> dict:
    return {"runs": a.runs, "n_batch50": a.n_batch50, "n_batch1": a.n_batch1,
            "batch50_linger_ms": a.linger_ms, "value_bytes": VALUE_SIZE,
            "message_bytes_on_log": MESSAGE_BYTES, "fetch_max_bytes": FETCH_BYTES,
            "latency_rate": a.latency_rate, "latency_seconds": a.latency_seconds,
            "latency_producer": "batch_size=1 linger_ms=0 acks=none",
            "prefill_gb": a.prefill_gb, "prefill_topics": a.prefill_topics,
            "broker_settings": dict(a.set or []) or "defaults",
            "producer_api": a.producer_api, "nice": a.nice, "wait_quiet_s": a.wait_quiet,
            "partition_named": "0 (produce_batch50, produce_batch1, produce_batch50_send); "
                               "none, the producer picks (*_common)",
            "common_multi_partitions": DEFAULT_PARTITIONS}


def summary_of(raw: dict) -> dict:
    def ok(runs):
        return [r for r in runs if "error" not in r]
    s: dict = {}
    for key in PRODUCE_KEYS:
        good = ok(raw.get(key, []))
        s[key] = {"msgs_per_s": summarize([r["msgs_per_s"] for r in good]),
                  "msgs_per_s_flush": summarize([r["msgs_per_s_flush"] for r in good]),
                  "mb_per_s": summarize([r["mb_per_s"] for r in good]),
                  "failed_runs": len(raw.get(key, [])) - len(good)}
    good = ok(raw["consume"])
    s["consume"] = {"msgs_per_s": summarize([r["msgs_per_s"] for r in good]),
                    "mb_per_s": summarize([r["mb_per_s"] for r in good]),
                    "broker_cpu_s_per_gb": summarize([r["broker_cpu_s_per_gb"] for r in good]),
                    "failed_runs": len(raw["consume"]) - len(good)}
    good = ok(raw["latency"])
    s["latency"] = {k: summarize([r[k] for r in good])
                    for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")}
    s["latency"]["failed_runs"] = len(raw["latency"]) - len(good)
    fsync = [1000 * r["broker_flushes"]["samsa_flush_seconds_sum"]
             / r["broker_flushes"]["samsa_flush_seconds_count"]
             for r in good if r.get("broker_flushes", {}).get("samsa_flush_seconds_count")]
    s["latency"]["fsync_mean_ms"] = summarize(fsync)
    return s


def fmt_produce(r: dict) -> str:
    if "error" in r and "msgs_per_s_flush" not in r:
        return "FAILED: " + r["error"]
    text = (f"{r.get('msgs_per_s', float('nan')):,.0f} msg/s until all in the broker "
            f"({r['all_in_broker_s']:.2f} s); {r['msgs_per_s_flush']:,.0f} msg/s until flush() "
            f"returned; client CPU {r['client_cpu_s']:.1f} s, broker CPU "
            f"{r.get('broker_cpu_s', 0):.1f} s")
    return text + (f"  ERROR: {r['error']}" if "error" in r else "")


def fmt_consume(r: dict) -> str:
    if "msgs_per_s" not in r:
        return "FAILED: " + r.get("error", "?")
    text = (f"{r['msgs_per_s']:,.0f} msg/s, {r['mb_per_s']:.1f} MB/s ({r['n']:,} messages in "
            f"{r['elapsed_s']:.2f} s); broker CPU {r['broker_cpu_s']:.2f} s = "
            f"{r.get('broker_cpu_s_per_gb', float('nan')):.2f} s/GB; client CPU "
            f"{r['client_cpu_s']:.1f} s")
    return text + (f"  ERROR: {r['error']}" if "error" in r else "")


def fmt_latency(r: dict) -> str:
    if "p50_ms" not in r:
        return "FAILED: " + r.get("error", "?")
    prod = r.get("producer", {})
    text = (f"p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms "
            f"({r['received']:,} messages at {prod.get('rate_achieved', 0):,.0f} msg/s; "
            f"broker CPU {r['broker_cpu_percent']:.0f}%)")
    return text + (f"  ERROR: {r['error']}" if "error" in r else "")


# ====================================================================== reporting

def write_results(result: dict, path_json: str, path_md: str) -> None:
    os.makedirs(os.path.dirname(path_json), exist_ok=True)
    with open(path_json, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    section = render_section(result, os.path.relpath(path_json, HERE))
    if not os.path.exists(path_md):
        with open(path_md, "w") as f:
            f.write("# Samsa benchmark results\n\n"
                    "Measured by `make bench` (`bench/run.py`, see `bench/README.md`): the Kafka "
                    "paper's single-broker\nworkload (200-byte messages) on the machine described "
                    "below. The section between the\nmarkers is rewritten by each full run; raw "
                    "runs are in `bench/results/`.\n")
    write_section(path_md, section, MARK_START, MARK_END)


def _fmt(v: float | None, spec: str = ",.0f") -> str:
    return "n/a" if v is None else format(v, spec)


def render_section(result: dict, json_rel: str) -> str:
    m, c, s = result["machine"], result["config"], result["summary"]
    lines = [f"## Broker benchmark ({result['started'][:10]})", "",
             f"**Machine:** {m.get('nproc')} cores ({m.get('cpu_model', '?')}), "
             f"{m.get('mem_total_gib', '?')} GiB RAM, Linux {m.get('kernel')}, "
             f"Python {m.get('python')}, C accelerator "
             f"{'on' if m.get('c_accelerator') else 'OFF'}; git {m['git']['head']}"
             f"{' + uncommitted broker/ changes' if m['git']['broker_dirty'] else ''}.", "",
             "**Method:** "
             + (f"sustained: one broker process (`BrokerProcess`) for every test, first filled "
                f"with {c['prefill_gb']:g} GB in {c['prefill_topics']} topics (batch 50); each "
                "test then writes a new topic, so the broker holds more with every test ("
                if c.get("prefill_gb") else
                "one broker process (`BrokerProcess`, fresh data directory per run, ")
             + f"broker settings: {c['broker_settings']}), clients in separate processes on the "
             f"same machine (2 cores shared by broker and client). {VALUE_SIZE}-byte random "
             f"values ({MESSAGE_BYTES} bytes each in the log), one partition. "
             + (f"Benchmark processes ran at nice {c['nice']} (the machine is shared). "
                if c.get("nice") else "") +
             f"Each figure is the median of {c['runs']} run{'s' if c['runs'] != 1 else ''} "
             "(min-max in brackets).",
             f"* *Produce*: one producer, acks=none; batch 50: `{c['producer_api']}()`"
             f"{' per message' if c['producer_api'] == 'send' else ' with 50 values per call (the paper producer API: the application hands over a message set; `send()` per message is shown below for comparison)'}"
             f"; batch 1: `send()` per message. N = {c['n_batch50']:,} (batch 50, linger "
             f"{c['batch50_linger_ms']} ms) / {c['n_batch1']:,} (batch 1, linger 0); "
             "throughput = N / time from the first send until the broker's latest offset "
             "(flushed, visible to consumers) reaches N x 222 bytes. The figure at "
             "`flush()` return (socket writes done) is shown too. These name `partition=0`; "
             "the same tests with no partition named (the common call: the producer picks "
             f"it) run on the same broker into a new one-partition topic, and batch 1 also "
             f"into a topic of {c.get('common_multi_partitions', DEFAULT_PARTITIONS)} partitions "
             "(the broker's default), under Other figures.",
             f"* *Consume*: one consumer drains the batch-50 run's N messages from earliest "
             f"with {FETCH_BYTES // 1024} KB fetches, CRC checks on, decoding every message. "
             "Broker CPU = utime+stime from /proc/<pid>/stat across the consume test, "
             "per GB (10^9 bytes) consumed.",
             f"* *Latency*: a producer paced at {c['latency_rate']:,} msg/s for "
             f"{c['latency_seconds']} s ({c['latency_producer']}: every message its own "
             "request, so no producer-side batching delay), default broker flush settings "
             "(flush.messages=10000, flush.ms=50: messages become visible once flushed); a "
             "consumer in another process long-polls and records receive time - send time "
             "(wall clock, embedded in the value).", "",
             "| Figure | Measured (median [min-max]) | Target | Paper (2011) | Met |",
             "|---|---|---|---|---|"]

    def row(name: str, key: str, field: str = "msgs_per_s", unit: str = "msg/s") -> str:
        st = s[key][field]
        target, paper = TARGETS[key]
        if not st:
            return f"| {name} | failed | >= {target:,} {unit} | {paper:,} | no |"
        met = "yes" if st["median"] >= target else "**no**"
        return (f"| {name} | {st['median']:,.0f} [{st['min']:,.0f}-{st['max']:,.0f}] {unit} | "
                f">= {target:,} {unit} | {paper:,} | {met} |")

    lines.append(row("Produce, batch 50 (all in broker)", "produce_batch50"))
    lines.append(row("Produce, batch 1 (all in broker)", "produce_batch1"))
    lines.append(row("Consume (200 KB fetches, CRC on)", "consume"))
    lines.append("")
    lines.append("| Other figures | Median [min-max] |")
    lines.append("|---|---|")

    def other(name: str, st: dict, spec: str = ",.0f", unit: str = "") -> str:
        if not st:
            return f"| {name} | failed |"
        return (f"| {name} | {format(st['median'], spec)} [{format(st['min'], spec)}-"
                f"{format(st['max'], spec)}]{unit} |")

    if s.get("produce_batch50_send", {}).get("msgs_per_s"):
        lines.append(other("Produce batch 50 with one send() call per message (all in broker)",
                           s["produce_batch50_send"]["msgs_per_s"], unit=" msg/s"))
    for key in ("produce_batch50_common", "produce_batch1_common", "produce_batch1_common_multi"):
        if s.get(key, {}).get("msgs_per_s"):
            lines.append(other(f"{PRODUCE_LABELS[key].capitalize()} (all in broker)",
                               s[key]["msgs_per_s"], unit=" msg/s"))
    lines.append(other("Produce batch 50, until flush() returned", s["produce_batch50"]
                       ["msgs_per_s_flush"], unit=" msg/s"))
    lines.append(other("Produce batch 1, until flush() returned", s["produce_batch1"]
                       ["msgs_per_s_flush"], unit=" msg/s"))
    lines.append(other("Produce batch 50", s["produce_batch50"]["mb_per_s"], ",.1f", " MB/s"))
    lines.append(other("Consume", s["consume"]["mb_per_s"], ",.1f", " MB/s"))
    lines.append(other("Broker CPU per GB consumed", s["consume"]["broker_cpu_s_per_gb"],
                       ",.2f", " CPU s/GB"))
    lines.append(other(f"End-to-end latency p50 at {c['latency_rate']:,} msg/s",
                       s["latency"]["p50_ms"], ",.1f", " ms"))
    lines.append(other("End-to-end latency p99", s["latency"]["p99_ms"], ",.1f", " ms"))
    lines.append(other("End-to-end latency max", s["latency"]["max_ms"], ",.1f", " ms"))
    if s["latency"].get("fsync_mean_ms"):
        lines.append(other("Broker fsync during the latency test, mean",
                           s["latency"]["fsync_mean_ms"], ",.1f", " ms"))
    raw = result["raw"]
    lines += ["", "Per run (for judging noise): broker CPU / client CPU / other processes' CPU "
              "(estimate) in seconds over the test window, and the machine's busy fraction "
              "just before the test:", ""]
    for key in ("produce_batch50", "consume", "produce_batch1", "produce_batch50_common",
                "produce_batch1_common", "produce_batch1_common_multi"):
        if not raw.get(key):
            continue
        cells = []
        for r in raw[key]:
            if "window_s" not in r:
                continue
            cells.append(f"{r.get('msgs_per_s', 0):,.0f}/s in {r['window_s']:.1f} s: "
                         f"{r['broker_cpu_s']:.1f} (sys {r.get('broker_system_s', 0):.1f}) / "
                         f"{r.get('client_cpu_total_s', 0):.1f} / "
                         f"{r.get('other_processes_cpu_s_est', 0):.1f}, "
                         f"busy {r.get('busy_fraction_before', 0):.0%}")
        lines.append(f"* {key}: " + "; ".join(cells))
    codes = {json.dumps(r.get("code"), sort_keys=True) for runs in raw.values() for r in runs}
    if len(codes) > 1:
        lines += ["", f"Note: broker/ changed while this benchmark ran ({len(codes)} different "
                  "code states across runs; each run's git state is in the JSON)."]
    failed = {k: v["failed_runs"] for k, v in s.items() if v.get("failed_runs")}
    if failed:
        lines += ["", f"Failed runs (excluded): {failed}."]
    lines += ["", f"Raw runs and machine details: `bench/{json_rel}`.", ""]
    return "\n".join(lines)


# ====================================================================== main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: small N, 1 run, short latency test; writes "
                        "bench/results/broker-<date>-quick.json and leaves RESULTS.md alone")
    p.add_argument("--runs", type=int, help="runs per figure (default 3; 1 with --quick)")
    p.add_argument("--n-batch50", type=int, help="messages, batch-50 produce and the consume "
                                                  "test (default 5,000,000)")
    p.add_argument("--n-batch1", type=int, help="messages, batch-1 produce (default 1,000,000)")
    p.add_argument("--linger-ms", type=int, default=5,
                   help="linger of the batch-50 producer (default 5, the client default)")
    p.add_argument("--producer-api", choices=["send", "send_many"], default="send_many",
                   help="batch-50 produce test: send_many() with 50 values per call "
                        "(default; the paper producer API) or send() per message")
    p.add_argument("--latency-rate", type=int, default=10_000, help="msg/s (default 10,000)")
    p.add_argument("--latency-seconds", type=float, help="default 10 (2 with --quick)")
    p.add_argument("--tests", default=",".join(TESTS),
                   help=f"comma-separated subset of {','.join(TESTS)} (produce50send: batch 50 "
                        "with send() per message; *_common: no partition named, the producer "
                        "picks it; produce50_common and produce50send run with produce50 or "
                        "consume; produce1_common_multi: into a topic of the broker's default "
                        "partition count)")
    p.add_argument("--prefill-gb", type=float, help="sustained figures: one broker for every "
                   "test, first filled with this many GB (default 4; 0 with --quick; 0 = a "
                   "fresh broker per test, the method before issue 14)")
    p.add_argument("--prefill-topics", type=int, default=4,
                   help="topics the pre-fill is spread over (default 4)")
    p.add_argument("--set", action="append", type=lambda kv: tuple(kv.split("=", 1)),
                   metavar="KEY=VALUE", help="broker setting (repeatable), e.g. "
                                             "log.flush_messages=50000")
    p.add_argument("--profile", metavar="DIR",
                   help="attach py-spy (raw collapsed stacks) to the broker and the clients "
                        "of every test; see bench/README.md")
    p.add_argument("--wait-quiet", type=float, default=120, metavar="SECONDS",
                   help="before each test, wait up to this long for the machine to be idle "
                        "(other processes skew the figures; default 120, 0 = never wait)")
    p.add_argument("--nice", type=int, default=0,
                   help="run the benchmark (broker and clients) at this nice value, e.g. -10 "
                        "on a machine shared with other jobs (needs root for < 0)")
    p.add_argument("--keep-logs", metavar="DIR", help="copy each broker log here")
    p.add_argument("--no-write", action="store_true", help="print only; write no files")
    p.add_argument("--json", metavar="PATH", help="also write the raw result (runs, summary, "
                                                  "machine) to PATH; see bench/ab.py")
    p.add_argument("--worker", nargs=2, metavar=("KIND", "PARAMS"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return a
    a.runs = a.runs or (1 if a.quick else 3)
    a.n_batch50 = a.n_batch50 or (300_000 if a.quick else 5_000_000)
    a.n_batch1 = a.n_batch1 or (100_000 if a.quick else 1_000_000)
    a.latency_seconds = a.latency_seconds or (2.0 if a.quick else 10.0)
    if a.prefill_gb is None:
        a.prefill_gb = 0.0 if a.quick else 4.0
    a.tests = {t.strip() for t in a.tests.split(",") if t.strip()}
    unknown = a.tests - set(TESTS)
    if unknown:
        p.error(f"unknown tests: {', '.join(sorted(unknown))}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.worker:
        return worker_main(*a.worker)
    # clean up (stop the broker, remove its directory) on Ctrl-C and on SIGTERM,
    # also when started in the background (where SIGINT starts out ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.nice:
        os.setpriority(os.PRIO_PROCESS, 0, a.nice)     # inherited by the broker and workers
    machine = machine_info()
    log(f"machine: {machine.get('nproc')} cores, {machine.get('cpu_model')}, "
        f"{machine.get('mem_total_gib')} GiB, Python {machine['python']}, "
        f"C accelerator {'on' if machine['c_accelerator'] else 'OFF'}")
    log(f"config: {config_of(a)}")
    result = Bench(a).run()
    result["machine"] = machine
    s = result["summary"]
    log("summary (medians):")
    for key in ("produce_batch50", "produce_batch1", "consume"):
        st = s[key]["msgs_per_s"]
        if st:
            target = TARGETS[key][0]
            log(f"  {key:16s} {st['median']:>12,.0f} msg/s  (target {target:,}: "
                f"{'met' if st['median'] >= target else 'MISSED'})")
    for key in ("produce_batch50_common", "produce_batch1_common", "produce_batch1_common_multi"):
        st = s[key]["msgs_per_s"]
        if st:
            log(f"  {key:16s} {st['median']:>12,.0f} msg/s  ({PRODUCE_LABELS[key]})")
    if s["consume"]["broker_cpu_s_per_gb"]:
        log(f"  broker CPU per GB consumed: {s['consume']['broker_cpu_s_per_gb']['median']:.2f} s")
    if s["latency"]["p50_ms"]:
        lat = s["latency"]
        log(f"  latency p50 {lat['p50_ms']['median']:.1f} ms, p99 {lat['p99_ms']['median']:.1f} "
            f"ms, max {lat['max_ms']['median']:.1f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    if a.no_write:
        return 0
    date = result["started"][:10]
    path_json = os.path.join(HERE, "results", f"broker-{date}{'-quick' if a.quick else ''}.json")
    if a.quick:
        os.makedirs(os.path.dirname(path_json), exist_ok=True)
        with open(path_json, "w") as f:
            json.dump(result, f, indent=2)
        log(f"wrote {os.path.relpath(path_json, ROOT)} (quick run: RESULTS.md left alone)")
    else:
        write_results(result, path_json, os.path.join(HERE, "RESULTS.md"))
        log(f"wrote {os.path.relpath(path_json, ROOT)} and bench/RESULTS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
