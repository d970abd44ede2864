"""The pipeline in containers against the same pipeline as processes.

    .venv/bin/python -m bench.containers_bench             # 5 runs of each (~4 min)
    .venv/bin/python -m bench.containers_bench --runs 5 --messages 2000000

Two figures (issue 17), on the images of ``make images``:

* **ready**: from nothing running (the images built) to the containerized
  pipeline serving — a 3-node ZooKeeper ensemble, dc-a's two brokers behind
  HAProxy, the analysis broker, the mirror (two processes), PostgreSQL, the
  audit service and a counter per cluster: 13 containers — each waited on until
  it serves (infra/docker/pipeline.py). Median of --runs, with each step's
  median.
* **containers vs processes**, alternated in one run: one datacenter broker
  behind HAProxy, the analysis broker, one mirror process, a standalone
  ZooKeeper, run as containers (host networking) and as processes (the lab,
  infra/local/lab.py), the same topology, the same client workers as
  ``make bench`` (bench/run.py): produce --messages 200-byte values through
  HAProxy (batch 50, acks=none; until all are in the broker), the mirror's
  copy (from the first send until analysis holds them all), then consume
  them from the broker (200 KB fetches, CRCs checked) with nothing else
  running; then one broker alone, a container against a process, the same
  produce and consume: what host networking itself costs.

Writes bench/results/containers-<UTC date>.json and the section between the
containers-bench markers in bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench.common import (HERE, ROOT, git_state, log, machine_info, parse_result,
                          summarize, wait_for_quiet, write_section)

MARK_START = "<!-- containers-bench:start -->"
MARK_END = "<!-- containers-bench:end -->"
TOPIC = "bench-containers"


def ready_topology():
    from infra.topology import ClusterSpec, LoadBalancerSpec, MirrorSpec, Topology, ZooKeeperSpec
    return Topology(name="bench-ready", zookeeper=ZooKeeperSpec(size=3),
                    datacenters=(ClusterSpec("dc-a", brokers=2,
                                             load_balancer=LoadBalancerSpec()),),
                    analysis=ClusterSpec("analysis", brokers=1),
                    mirrors=(MirrorSpec("to-analysis", sources=("dc-a",), target="analysis",
                                        processes=2),))


def throughput_topology():
    from infra.topology import ClusterSpec, LoadBalancerSpec, MirrorSpec, Topology
    return Topology(name="bench-ab",
                    datacenters=(ClusterSpec("dc-a", brokers=1, default_partitions=1,
                                             load_balancer=LoadBalancerSpec()),),
                    analysis=ClusterSpec("analysis", brokers=1, default_partitions=1),
                    mirrors=(MirrorSpec("to-analysis", sources=("dc-a",), target="analysis",
                                        processes=1, target_partitions=1,
                                        whitelist=TOPIC),))


def worker(kind: str, params: dict, timeout: float = 900) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.run", "--worker", kind,
                          json.dumps(params)], capture_output=True, text=True, cwd=ROOT,
                         timeout=timeout)
    return parse_result(kind, out.returncode, out.stdout)


def copied_messages(address: str) -> int:
    from broker.client.admin import AdminClient
    from bench.mirror_bench import target_messages
    with AdminClient(address) as admin:
        return target_messages(admin, TOPIC)


def measure(produce_to: str, consume_from: str, n: int, analysis: str | None = None) -> dict:
    """Produce ``n`` through ``produce_to``; with ``analysis``, wait until the
    mirror has copied them all there (it copies meanwhile); then consume them
    from ``consume_from`` alone (so the mirror's work does not share the 2
    cores with the consumer)."""
    from broker.client.admin import AdminClient
    with AdminClient(consume_from) as admin:
        admin.create_topic(TOPIC, 1)
    t0 = time.perf_counter()
    produced = worker("produce", {"bootstrap": produce_to, "topic": TOPIC, "n": n,
                                  "batch_size": 50, "linger_ms": 5})
    out: dict = {"produce": produced.get("msgs_per_s")}
    errors = [produced["error"]] if "error" in produced else []
    if analysis is not None:
        deadline = time.perf_counter() + 300
        copied = copied_messages(analysis)
        while copied < n and time.perf_counter() < deadline:
            time.sleep(0.02)
            copied = copied_messages(analysis)
        out.update(mirror=n / (time.perf_counter() - t0) if copied >= n else None, copied=copied)
        if copied < n:
            errors.append(f"the mirror copied {copied} of {n} in 300 s")
    consumed = worker("consume", {"bootstrap": consume_from, "topic": TOPIC, "n": n,
                                  "fetch_bytes": 200 * 1024})
    out["consume"] = consumed.get("msgs_per_s")
    if "error" in consumed:
        errors.append(consumed["error"])
    if errors:
        out["error"] = "; ".join(errors)
    return out


def run_containers(containers_cls, topology, directory: str, n: int) -> dict:
    from infra.docker.pipeline import ContainerPipeline
    group = containers_cls()
    try:
        pipe = ContainerPipeline(group.run, topology, directory).up(timeout=90)
        return measure(pipe.lb_address("dc-a"), pipe.broker_address("dc-a", 0), n,
                       pipe.broker_address("analysis", 0))
    finally:
        group.remove_all()


def lone_broker(runtime: str, containers_cls, directory: str, n: int) -> dict:
    """One broker alone, as a container (host networking) or a process: the
    same produce (batch 50, acks=none) and consume workers against it."""
    from infra.docker.pipeline import SAMSA, free_ports, metadata_answers
    if runtime == "processes":
        from broker.harness import BrokerProcess
        broker = BrokerProcess(directory).start()
        try:
            address = f"127.0.0.1:{broker.port}"
            return measure(address, address, n)
        finally:
            broker.stop()
    group = containers_cls()
    port, metrics = free_ports(2)
    address = f"127.0.0.1:{port}"
    try:
        group.run("lone-broker", SAMSA, command=["broker", "--port", str(port), "--metrics-port",
                                                 str(metrics), "--data-dir", "/data"],
                  ready=lambda s: metadata_answers(address))
        return measure(address, address, n)
    finally:
        group.remove_all()


def run_processes(topology, directory: str, n: int) -> dict:
    from infra.local.lab import Lab
    lab = Lab(topology, directory)
    try:
        lab.up(timeout=90)
        return measure(lab.lb_address("dc-a"), lab.broker_address("dc-a", 0), n,
                       lab.broker_address("analysis", 0))
    finally:
        lab.down(purge=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--messages", type=int, default=3_000_000)
    p.add_argument("--no-write", action="store_true", help="print only: write neither bench/RESULTS.md nor the results JSON")
    a = p.parse_args(argv)
    from infra.docker import engine
    host = engine.up()
    os.environ["DOCKER_HOST"] = host
    os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"
    from infra.docker.containers import Containers
    from infra.local.lab import free_topology
    quiet = wait_for_quiet(30)
    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "machine": machine_info(), "code": git_state(), "engine": host,
              "quiet": quiet, "runs": a.runs, "messages": a.messages,
              "ready": [], "ab": []}
    with tempfile.TemporaryDirectory(prefix="samsa-containers-bench-") as tmp:
        from infra.docker.pipeline import ContainerPipeline
        for run in range(a.runs):
            group = Containers()
            try:
                pipe = ContainerPipeline(group.run, free_topology(ready_topology()),
                                         os.path.join(tmp, f"ready-{run}"))
                pipe.up(timeout=90, audit=True)
            finally:
                group.remove_all()
            result["ready"].append(pipe.seconds)
            log(f"ready run {run + 1}: {pipe.seconds['total']:.1f} s (" + ", ".join(
                f"{k} {v:.1f}" for k, v in pipe.seconds.items() if k != "total") + ")")
        for run in range(a.runs):
            order = ("containers", "processes") if run % 2 == 0 else ("processes", "containers")
            for runtime in order:
                topology = free_topology(throughput_topology())
                directory = os.path.join(tmp, f"{runtime}-{run}")
                r = (run_containers(Containers, topology, directory, a.messages)
                     if runtime == "containers" else run_processes(topology, directory,
                                                                   a.messages))
                r.update(run=run, runtime=runtime)
                result["ab"].append(r)
                log(f"{runtime} run {run + 1}: produce {r['produce'] or 0:,.0f} msg/s, consume "
                    f"{r['consume'] or 0:,.0f} msg/s, mirror {r['mirror'] or 0:,.0f} msg/s"
                    + (f"  ERROR {r['error']}" if "error" in r else ""))
        result["lone"] = []
        for run in range(a.runs):
            order = ("containers", "processes") if run % 2 == 0 else ("processes", "containers")
            for runtime in order:
                r = lone_broker(runtime, Containers, os.path.join(tmp, f"lone-{runtime}-{run}"),
                                a.messages)
                r.update(run=run, runtime=runtime)
                result["lone"].append(r)
                log(f"lone broker, {runtime} run {run + 1}: produce {r['produce'] or 0:,.0f} "
                    f"msg/s, consume {r['consume'] or 0:,.0f} msg/s"
                    + (f"  ERROR {r['error']}" if "error" in r else ""))
    result["summary"] = summary_of(result)
    day = result["date"][:10]
    path = os.path.join(HERE, "results", f"containers-{day}.json")
    section = render(result, os.path.relpath(path, HERE))
    print(section)
    if not a.no_write:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
        write_section(os.path.join(HERE, "RESULTS.md"), section, MARK_START, MARK_END)
    return 1 if any("error" in r for r in result["ab"]) else 0


def _compare(runs: list[dict], figures: tuple[str, ...]) -> dict:
    """Medians per runtime, and the median of the per-run ratios containers /
    processes (each pair measured back to back in one run)."""
    out: dict = {}
    for runtime in ("containers", "processes"):
        ok = [r for r in runs if r["runtime"] == runtime and "error" not in r]
        out[runtime] = {k: summarize([r[k] for r in ok]) for k in figures}
    ratios = {}
    for k in figures:
        pairs = [(c[k], p[k]) for c in runs for p in runs
                 if c["runtime"] == "containers" and p["runtime"] == "processes"
                 and c["run"] == p["run"] and "error" not in c and "error" not in p]
        ratios[k] = statistics.median(c / p for c, p in pairs) if pairs else None
    out["ratio_containers_to_processes"] = ratios
    return out


def summary_of(result: dict) -> dict:
    steps = sorted({k for r in result["ready"] for k in r})
    return {"ready": {k: summarize([r[k] for r in result["ready"] if k in r]) for k in steps},
            "pipeline": _compare(result["ab"], ("produce", "consume", "mirror")),
            "lone": _compare(result.get("lone", []), ("produce", "consume"))}


def render(result: dict, json_rel: str) -> str:
    s = result["summary"]
    ready = s["ready"]
    m = result["machine"]
    lines = [
        "## Containers: the pipeline ready, and containers vs processes (issue 17)",
        "",
        f"`make bench-containers` ({result['date']}, {m.get('cpu_model', '?')}, "
        f"{m.get('nproc')} cores; code {result['code'].get('head', '?')}; raw: "
        f"`bench/{json_rel}`). Medians of {result['runs']} runs (min-max).",
        "",
        f"**Ready**: the containerized pipeline (3-node ZooKeeper, dc-a's 2 brokers behind "
        f"HAProxy, the analysis broker, the mirror's 2 processes, PostgreSQL, the audit service, "
        f"a counter per cluster: 13 containers) from nothing running to every container "
        f"serving: **{ready['total']['median']:.1f} s** ({ready['total']['min']:.1f}-"
        f"{ready['total']['max']:.1f}; goal <= 20 s). Steps: " + ", ".join(
            f"{k} {v['median']:.1f} s" for k, v in ready.items() if k != "total") + ".",
        "",
        f"**Containers vs processes**, alternated in one run ({result['messages']:,} "
        f"messages of 200 B each way, host networking): the pipeline (one broker per cluster, "
        f"HAProxy, one mirror process), then one broker alone:",
        "",
        "| figure (msg/s) | containers | processes | containers / processes (median of "
        "the per-run ratios) |",
        "|---|---|---|---|",
    ]
    rows = (("pipeline", "produce", "pipeline: produce through HAProxy, batch 50"),
            ("pipeline", "mirror", "pipeline: the mirror's copy, first send to all in analysis"),
            ("pipeline", "consume", "pipeline: consume from the broker, once the mirror is done"),
            ("lone", "produce", "a lone broker: produce, batch 50"),
            ("lone", "consume", "a lone broker: consume"))
    for part, k, what in rows:
        c, p = s[part]["containers"].get(k, {}), s[part]["processes"].get(k, {})
        ratio = s[part]["ratio_containers_to_processes"].get(k)
        lines.append(f"| {what} | {c.get('median', 0):,.0f} | {p.get('median', 0):,.0f} | "
                     f"{ratio:.2f} |" if ratio else f"| {what} | - | - | - |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
