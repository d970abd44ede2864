"""Freshness of the whole pipeline (issue 13): how long after a produce in a
datacenter the audit shows the window complete, and the row is readable in
Parquet, for loads run every few minutes and for the hourly DAG.

    python -m bench.freshness_bench [--bursts 5] [--load-every 120] [--cycles 3] [--hours 3]

The demo's pipeline (infra/local/pipeline.py: two datacenters behind
HAProxy, the mirror, a counter per cluster, the audit service, a real
Airflow) with the demo's settings: the counters and the mirror publish
their counts every 2 s, the DAG's sensor pokes every 5 s. Three measures,
one after the other:

1. **Produce → audit complete.** A burst of audited events per datacenter,
   event times now; from the last acknowledgement until every tier
   (producers, each cluster, the mirror) shows the window ``complete``.
   The producers publish their counts on close, as a batch job's would.
2. **Produce → Parquet, a load every few minutes.** An audited producer
   per datacenter sends events at a steady rate, event time = the moment
   of the send, while the loader (spark-submit, exactly as the DAG's
   ``load`` task runs it; no audit gate) runs every ``--load-every``
   seconds. A row's freshness is the end of the load that published it
   minus its event time; the loader's own run time is reported beside.
3. **Produce → Parquet, hourly.** For each of ``--hours`` past hours:
   events whose times fall in the hour's last minute (as if produced just
   before the hour ended), then Airflow's ``warehouse_load`` for that hour
   (sensor on the audit, load, validate, ``_SUCCESS``), triggered as the
   scheduler does when the hour ends. Measured: from the last
   acknowledgement to the hour's ``_SUCCESS`` (the delay after the hour
   ends). A row's freshness is then the rest of its hour plus that delay:
   half an hour plus it for the median row, an hour plus it at worst
   (computed from the measured delay, not waited for).

Client, brokers, Spark and Airflow share this machine's 2 cores. Results go
to bench/results/freshness.json and a section of bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request

from bench.common import log, machine_info, percentile, save_results
from infra.local.pipeline import Pipeline, call_airflow
from infra.local.traffic import HOUR_MS, TOPIC_WEIGHTS, make_event

DCS = ("dc-a", "dc-b")
SECTION_START = "<!-- freshness_bench:start -->"
SECTION_END = "<!-- freshness_bench:end -->"


class Producers:
    """One audited producer per datacenter through its load balancer, as the
    demo's traffic makes them; ``send(dc, n, times)`` returns when acked."""

    def __init__(self, pipeline: Pipeline, seed: int, interval_s: float = 5.0) -> None:
        from audit.counting import AUDIT_TOPIC, AuditedProducer
        from broker.client.producer import Producer
        from schemas.registry import SchemaRegistry
        from schemas.wire import ValueWriter
        self.rng = random.Random(seed)
        self.topics = [t for t, w in TOPIC_WEIGHTS for _ in range(w)]
        self.registries, self.producers, self.writers = {}, {}, {}
        for dc in DCS:
            registry = SchemaRegistry.open(f"zookeeper://{pipeline.lab.zookeeper_connect(dc)}")
            self.registries[dc] = registry
            self.writers[dc] = {t: ValueWriter(registry, t, version=1)
                                for t, _ in TOPIC_WEIGHTS}
            self.producers[dc] = AuditedProducer.publishing(
                Producer(bootstrap=pipeline.lab.lb_address(dc), acks="flushed",
                         batch_size=200, linger_ms=5),
                ValueWriter(registry, AUDIT_TOPIC), datacenter=dc, cluster=dc,
                interval_s=interval_s, service="freshness-bench")
        self.sent = 0

    def send(self, dc: str, times: list[int]) -> None:
        producer, writers = self.producers[dc], self.writers[dc]
        futures = []
        for t in times:
            topic = self.topics[self.sent % len(self.topics)]
            self.sent += 1
            record, key, _version = make_event(topic, self.rng, t, False, 5_000)
            futures.append(producer.send(topic, writers[topic].encode(record), key=key,
                                         timestamp=t))
        producer.flush()
        for f in futures:
            f.result(timeout=120)

    def close(self) -> None:
        for dc in DCS:
            self.producers[dc].close()        # publishes the last counts
            self.registries[dc].close()


def verdicts(pipeline: Pipeline, begin: int, end: int) -> list[dict]:
    return pipeline.verdicts(begin, end)


EVERY_TIER = {("producer", "dc-a"), ("producer", "dc-b"), ("cluster", "dc-a"),
              ("cluster", "dc-b"), ("cluster", "analysis"), ("mirror", "dc-a"),
              ("mirror", "dc-b")}


def wait_complete(pipeline: Pipeline, begin: int, end: int, expected: int, since: float,
                  timeout: float = 300.0) -> float:
    """Seconds from ``since`` (monotonic) until every tier but the loader's
    (each producer, each cluster, the mirror from each source) shows
    [begin, end) complete with ``expected`` messages produced."""
    while time.monotonic() - since < timeout:
        vs = [v for v in verdicts(pipeline, begin, end) if v["tier"] != "hadoop"]
        produced = sum(v["produced"] for v in vs if v["tier"] == "producer")
        if produced == expected and {(v["tier"], v["cluster"]) for v in vs} >= EVERY_TIER \
                and all(v["state"] == "complete" for v in vs):
            return time.monotonic() - since
        time.sleep(0.1)
    raise TimeoutError(f"the audit did not show [{begin}, {end}) complete in {timeout:.0f} s")


# ------------------------------------------------------------ 1. the audit

def audit_freshness(pipeline: Pipeline, bursts: int, per_dc: int, seed: int) -> list[float]:
    out = []
    window = 600_000
    expected: dict[int, int] = {}
    for k in range(bursts):
        producers = Producers(pipeline, seed * 1000 + k)      # distinct event ids
        now = int(time.time() * 1000)
        begin = now - now % window
        if now + 5_000 > begin + window:          # do not straddle two windows
            time.sleep((begin + window - now) / 1000 + 0.1)
            now = int(time.time() * 1000)
            begin = now - now % window
        for dc in DCS:
            producers.send(dc, [now] * per_dc)
        acked = time.monotonic()
        producers.close()                          # the counts go on close
        expected[begin] = expected.get(begin, 0) + per_dc * len(DCS)
        seconds = wait_complete(pipeline, begin, begin + window, expected[begin], acked)
        log(f"audit: burst {k + 1}/{bursts}: every tier complete {seconds:.2f} s after the "
            f"last acknowledgement")
        out.append(seconds)
    return out


# ------------------------------------------------------------ 2. frequent loads

def parquet_event_times(warehouse: str, seen: set) -> list[int]:
    """Event times of the rows in Parquet files not in ``seen`` (then added)."""
    import pyarrow.parquet as pq
    times = []
    for path in glob.glob(os.path.join(warehouse, "*", "date=*", "hour=*", "*.parquet")):
        if path in seen:
            continue
        seen.add(path)
        headers = pq.read_table(path, columns=["header"]).column("header").to_pylist()
        times += [h["time_ms"] for h in headers]
    return times


def frequent_loads(pipeline: Pipeline, every_s: float, cycles: int, rate: int,
                   seed: int) -> dict:
    from hadoop_loader import dag_steps
    warehouse = pipeline.path("warehouse")
    config = pipeline.path("warehouse.toml")
    seen: set = set()
    dag_steps.load(config)                         # everything older is out of the way
    parquet_event_times(warehouse, seen)
    producers = Producers(pipeline, seed * 1000)
    stop = threading.Event()
    started_ms = int(time.time() * 1000)

    def steady() -> None:
        tick = 0.1
        next_at = time.monotonic()
        while not stop.is_set():
            now = int(time.time() * 1000)
            for dc in DCS:
                producers.send(dc, [now] * max(1, int(rate * tick)))
            next_at += tick
            stop.wait(max(0.0, next_at - time.monotonic()))

    thread = threading.Thread(target=steady, daemon=True)
    thread.start()
    ages: list[float] = []
    runs: list[float] = []
    try:
        for cycle in range(cycles):
            time.sleep(every_s)
            t0 = time.monotonic()
            dag_steps.load(config)
            done_ms = int(time.time() * 1000)
            runs.append(time.monotonic() - t0)
            fresh = [(done_ms - t) / 1000 for t in parquet_event_times(warehouse, seen)
                     if t >= started_ms]
            ages += fresh
            fresh.sort()
            log(f"loads every {every_s:.0f} s: cycle {cycle + 1}/{cycles}: the load took "
                f"{runs[-1]:.1f} s, {len(fresh):,} new rows, freshness p50 "
                f"{percentile(fresh, 50):.1f} s, max {fresh[-1] if fresh else float('nan'):.1f} s")
    finally:
        stop.set()
        thread.join()
        producers.close()
    ages.sort()
    return {"every_s": every_s, "cycles": cycles, "rate_per_dc": rate, "rows": len(ages),
            "p50_s": percentile(ages, 50), "p99_s": percentile(ages, 99), "max_s": ages[-1],
            "load_run_s": runs, "load_run_median_s": statistics.median(runs)}


# ------------------------------------------------------------ 3. the hourly DAG

def hourly_delay(pipeline: Pipeline, hours: int, per_dc: int, seed: int) -> list[float]:
    from hadoop_loader.dag_steps import hour_partition
    from hadoop_loader.outputfs import OutputFS
    out = OutputFS(pipeline.path("warehouse"))
    url = f"http://127.0.0.1:{pipeline.airflow_port}/api/v2/dags/warehouse_load"
    token = pipeline.airflow_token()
    call_airflow(url, token, {"is_paused": False}, method="PATCH")

    def no_scheduled_runs() -> None:
        # unpaused, the scheduler makes a run for the latest hour by itself:
        # it would hold the one active run (max_active_runs = 1), skew the
        # figure and take the logical date of a trial's hour: delete it
        for run in call_airflow(f"{url}/dagRuns?limit=100", token)["dag_runs"]:
            if run["run_type"] == "scheduled":
                run_url = f"{url}/dagRuns/{run['dag_run_id']}"
                if run["state"] in ("queued", "running"):      # a running run cannot go
                    call_airflow(run_url, token, {"state": "failed"}, method="PATCH")
                request = urllib.request.Request(run_url, method="DELETE",
                                                 headers={"Authorization": f"Bearer {token}"})
                urllib.request.urlopen(request, timeout=30).close()
    now = int(time.time() * 1000)
    delays = []
    for k in range(hours):
        end = now - now % HOUR_MS - k * HOUR_MS           # the hour [end - 1 h, end)
        hour = end - HOUR_MS
        producers = Producers(pipeline, seed * 1000 + k)
        for dc in DCS:
            producers.send(dc, [end - 60_000 + i * 60_000 // per_dc for i in range(per_dc)])
        t0 = time.monotonic()
        producers.close()
        no_scheduled_runs()
        run_id = f"freshness-{dt.datetime.fromtimestamp(hour / 1000, dt.timezone.utc):%Y%m%dT%H}"
        call_airflow(f"{url}/dagRuns", token, {
            "logical_date": dt.datetime.fromtimestamp(hour / 1000, dt.timezone.utc).isoformat(),
            "dag_run_id": f"{run_id}-{int(time.time())}"})
        marker = hour_partition("page_views", hour)
        while not out.exists(marker, "_SUCCESS"):
            no_scheduled_runs()
            if time.monotonic() - t0 > 900:
                raise TimeoutError(f"warehouse_load for {run_id} did not finish in 900 s")
            time.sleep(0.2)
        delays.append(time.monotonic() - t0)
        log(f"hourly: {run_id}: _SUCCESS {delays[-1]:.1f} s after the last acknowledgement")
    return delays


def section(result: dict) -> str:
    a, f, h = result["audit_s"], result["frequent"], result["hourly_delay_s"]
    m = result["machine"]
    hd = statistics.median(h)
    lines = [
        f"## Freshness: produce → audit complete → Parquet (issue 13), "
        f"{result['date']}", "",
        "**Method:** `python -m bench.freshness_bench` (see its docstring): the demo's "
        "pipeline (two datacenters of two brokers behind HAProxy, the mirror, a counter per "
        "cluster and the audit service, a real Airflow), the demo's settings (counters and "
        "mirror publish every 2 s, the sensor pokes every 5 s, Spark local[2]); "
        f"machine: {m.get('nproc')} cores ({m.get('cpu_model', '?')}), Python {m['python']}; "
        "brokers, clients, Spark and Airflow share the 2 cores.", "",
        "| Figure | median | runs / spread |", "|---|---|---|",
        f"| produce → audit shows the window complete at every tier (burst of "
        f"{result['burst_per_dc']:,} per DC, last ack to complete) | {statistics.median(a):.1f} s"
        f" | {' '.join(f'{x:.1f}' for x in a)} |",
        f"| produce → row in Parquet, a load every {f['every_s']:.0f} s (steady "
        f"{f['rate_per_dc']} events/s per DC, {f['rows']:,} rows over {f['cycles']} loads) "
        f"| {f['p50_s']:.0f} s | p99 {f['p99_s']:.0f} s, max {f['max_s']:.0f} s |",
        f"| ... of which one load (spark-submit, plan, pull, write, publish) | "
        f"{f['load_run_median_s']:.1f} s | {' '.join(f'{x:.1f}' for x in f['load_run_s'])} |",
        f"| hourly warehouse_load: hour's end → `_SUCCESS` (sensor, load, validate, mark) | "
        f"{hd:.1f} s | {' '.join(f'{x:.1f}' for x in h)} |",
        f"| produce → row in Parquet, hourly (rest of the hour + the delay above; computed) | "
        f"30 min + {hd:.0f} s | worst 60 min + {max(h):.0f} s |", "",
        "What sets them: the audit's figure is the publish interval of the counters and the "
        "mirror (2 s here; `audit count` publishes every 60 s by default, the mirror every "
        "1 s, a long-running audited producer every minute) plus the mirror's copy of the "
        "`_audit` topic; with the defaults, expect up to a minute more. A frequent load "
        "is as fresh as half its period plus one load (a SparkSession alone takes 7-9 s "
        "to start on this machine); it is not gated on the audit (a gate can pass "
        "only windows the producers have closed). The hourly load waits for its hour to end, "
        "then for the sensor's next poke (every 5 s here; 300 s in config/loader.toml), "
        "then loads.", "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.freshness_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bursts", type=int, default=5, help="audit bursts (default 5)")
    p.add_argument("--burst", type=int, default=2_000, help="events per DC per burst")
    p.add_argument("--load-every", type=float, default=120.0,
                   help="seconds between frequent loads (default 120)")
    p.add_argument("--cycles", type=int, default=3, help="frequent loads (default 3)")
    p.add_argument("--rate", type=int, default=200, help="steady events/s per DC (default 200)")
    p.add_argument("--hours", type=int, default=3, help="hourly DAG runs (default 3)")
    p.add_argument("--parts", default="audit,frequent,hourly",
                   help="which measures to take (default all three); the others are kept "
                        "from bench/results/freshness.json")
    p.add_argument("--dir", default=None, help="state directory (default: a temporary one)")
    p.add_argument("--no-write", action="store_true", help="do not touch bench/RESULTS.md")
    args = p.parse_args(argv)
    parts = set(args.parts.split(","))
    if parts - {"audit", "frequent", "hourly"}:
        p.error("--parts takes audit, frequent, hourly")
    result = {"date": time.strftime("%Y-%m-%d"), "machine": machine_info(),
              "burst_per_dc": args.burst}
    previous = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                            "freshness.json")
    if parts != {"audit", "frequent", "hourly"} and os.path.exists(previous):
        with open(previous) as f:
            result = {**json.load(f), **result}
    state = args.dir or tempfile.mkdtemp(prefix="samsa-freshness-")
    # open, as the figures on record were measured (its producers have no
    # credentials; `make demo` runs secured)
    pipeline = Pipeline(state, secure=False)
    try:
        pipeline.start()
        pipeline.traffic(1_000, 1)                  # warm every path once
        if "audit" in parts:
            result["audit_s"] = audit_freshness(pipeline, args.bursts, args.burst, seed=7)
        if "frequent" in parts:
            result["frequent"] = frequent_loads(pipeline, args.load_every, args.cycles,
                                                args.rate, seed=8)
        if "hourly" in parts:
            result["hourly_delay_s"] = hourly_delay(pipeline, args.hours, args.burst, seed=9)
    finally:
        pipeline.stop()
        if not args.dir:
            shutil.rmtree(state, ignore_errors=True)
    missing = {"audit_s", "frequent", "hourly_delay_s"} - set(result)
    if missing:                     # kept for the next run of the other parts
        os.makedirs(os.path.dirname(previous), exist_ok=True)
        with open(previous, "w") as f:
            json.dump(result, f, indent=1)
        print(f"saved in {previous}; not measured yet: {', '.join(sorted(missing))} "
              f"(run the other --parts)")
        return 0
    save_results("freshness", result, section(result), SECTION_START, SECTION_END,
                 not args.no_write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
