"""The mirror across a WAN (issue 29, point 3): its throughput against the
round-trip time of the link between the source datacenter and the analysis
datacenter, in the network lab (docs/network-lab.md), A/B in one run.

    .venv/bin/python -m bench.mirror_wan_bench              # full run (~20 min), root
    .venv/bin/python -m bench.mirror_wan_bench --quick      # smoke run, no RESULTS.md update

A lab in the netns runtime: dc-a (one broker) and analysis (one broker),
each with its own ZooKeeper, joined by the link dc-a <-> analysis. One topic
of 4 partitions in dc-a is preloaded with --messages 200-byte messages once.
For each link shape (round trip 0, 10, 40, 100, 200 ms, and 40 ms with 0.5 %
loss each way) and each variant, ``python -m mirror`` runs in the analysis
datacenter's mirror host with a new group (it copies the whole topic from
its start, into a target topic deleted after each copy); the target broker's log ends, read over the lab's management
network every 20 ms, time the copy from the first message in the target to
the last: throughput = messages / that time, and in steady state (10 % to
90 %). The start-up (process start, group join through ZooKeeper across
the link, first fetch) until the first message is reported apart.
Variants alternate within each round, --runs rounds; medians per case, and
each variant's rate over its own 0 ms rate (the "loopback" of the lab: the
same path through the router with nothing added).

Variants: A = --a-settings, by default the mirror as it was before issue
29 (a fixed 1 MiB receive buffer, 1 MiB per partition per fetch); B =
--b-settings, by default none: the mirror's defaults. Both against the same
brokers (their send buffers autotuned) and hosts (TCP buffers up to
network.tcp_buffer_max_bytes). Writes bench/results/mirror-wan-<UTC date>.json, a plot
(bench/results/mirror-wan-<UTC date>.svg) and the mirror-wan section of
bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import statistics
import sys
import tempfile
import time

from bench.common import log, machine_info, random_values, save_results
from broker.client.admin import AdminClient
from broker.client.producer import Producer
from broker.coordination.named_cluster import NamedCluster
from broker.protocol.message import message_size
from broker.service_kit import settings as settings_kit
from broker.service_kit.process import SupervisedProcess
from infra.local.lab import Lab
from infra.local.network import control
from infra.local.network.runner import missing_requirements
from infra.topology import (ClusterSpec, LinkSpec, LoadBalancerSpec, MirrorSpec, NetworkSpec,
                            Topology)
from mirror.config import MirrorConfig

START = "<!-- mirror-wan-bench:start -->"
END = "<!-- mirror-wan-bench:end -->"
VALUE_SIZE = 200
SIZE = message_size(None, b"x" * VALUE_SIZE)
PARTITIONS = 4
TOPIC = "wan"
MIRROR_HOST = "to-analysis.mirror-0"
CASES = [(0, 0.0), (10, 0.0), (40, 0.0), (100, 0.0), (200, 0.0), (40, 0.005)]
#: the mirror as it was before issue 29 (the A of the A/B): a fixed 1 MiB
#: receive buffer and 1 MiB per partition per fetch
TODAY = ("socket_receive_buffer_bytes=1048576", "fetch_max_bytes=1048576", "fetch_rate_bytes=0",
         "fetchers_per_source_broker=1")


def topology(subnet: str) -> Topology:
    return Topology(
        name="mirror-wan-bench",
        datacenters=(ClusterSpec("dc-a", brokers=1, default_partitions=PARTITIONS,
                                 load_balancer=LoadBalancerSpec()),),
        analysis=ClusterSpec("analysis", brokers=1, default_partitions=PARTITIONS),
        mirrors=(MirrorSpec("to-analysis", sources=("dc-a",), target="analysis",
                            processes=1),),
        network=NetworkSpec(subnet=subnet, links=(LinkSpec(("dc-a", "analysis")),)))


def target_messages(admin: AdminClient) -> int:
    count = admin.partition_count(TOPIC)
    if not count:
        return 0
    return sum(admin.latest_offset(TOPIC, p) for p in range(count)) // SIZE


def preload(lab: Lab, messages: int) -> None:
    address = lab.broker_address("dc-a", 0)
    with AdminClient(address) as admin:
        admin.create_topic(TOPIC, PARTITIONS)
    values = random_values(1000, VALUE_SIZE)
    with Producer(bootstrap=address, acks="written", batch_size=500,
                  batch_bytes=1 << 20) as producer:
        chunk = [values[i % len(values)] for i in range(500)]
        for i in range(0, messages, 500):
            producer.send_many(TOPIC, chunk, partition=(i // 500) % PARTITIONS)
        producer.flush(300)
    time.sleep(0.5)                     # the broker's last flush


def copy_once(lab: Lab, work: str, name: str, messages: int, overrides: dict) -> dict:
    """One mirror process, a new group: the whole topic copied once."""
    config = MirrorConfig(
        sources=(NamedCluster("dc-a", lab.zookeeper_connect("dc-a")),),
        target=NamedCluster("analysis", lab.zookeeper_connect("analysis")),
        group=name, whitelist=TOPIC, metrics_port=-1, target_partitions=PARTITIONS)
    values = dataclasses.asdict(config)
    settings_kit.apply_overrides(values, overrides)
    config = settings_kit.build(MirrorConfig, values)
    path = os.path.join(work, f"{name}.toml")
    with open(path, "w") as f:
        f.write(settings_kit.to_toml(config))
    admin = AdminClient(lab.broker_address("analysis", 0))
    before = target_messages(admin)
    started = time.monotonic()
    proc = SupervisedProcess(name, control.enter_command(
        lab.state_dir, MIRROR_HOST, [sys.executable, "-m", "mirror", "--config", path,
                                     "--log-format", "json"]),
        os.path.join(work, f"{name}.log")).start()
    timeline = []
    try:
        while True:
            n = target_messages(admin) - before
            timeline.append((time.monotonic() - started, n))
            if n >= messages:
                break
            if proc.poll() is not None:
                raise RuntimeError(f"the mirror exited with {proc.returncode}: "
                                   f"{work}/{name}.log")
            if time.monotonic() - started > 900:
                raise RuntimeError("the copy took more than 15 minutes")
            time.sleep(0.02)
    finally:
        proc.stop(60)
        try:        # the next copy starts from an empty target (and the disk stays free)
            admin.delete_topic(TOPIC)
        finally:
            admin.close()

    def when(fraction: float) -> float:
        return next(t for t, n in timeline if n >= fraction * messages)
    done = timeline[-1][0]
    first = next(t for t, n in timeline if n > 0)
    return {"seconds": done - first, "msg_s": messages / max(done - first, 1e-3),
            "steady_msg_s": 0.8 * messages / max(when(0.9) - when(0.1), 1e-3),
            "first_copy_s": first}


def run(args) -> dict:
    variants = {"A": settings_kit.parse_overrides(args.a_settings),
                "B": settings_kit.parse_overrides(args.b_settings)}
    cases = CASES
    if args.cases:
        cases = [(int(c.partition(":")[0]), float(c.partition(":")[2] or 0))
                 for c in args.cases]
    elif args.quick:
        cases = [(0, 0.0), (100, 0.0)]
    rows: dict[tuple[int, float, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="samsa-mirror-wan-") as work:
        lab = Lab(topology(args.subnet), os.path.join(work, "lab"), runtime="netns")
        lab.up(timeout=90, mirrors=False, monitoring=False)
        try:
            log(f"preloading {args.messages:,} messages into dc-a")
            preload(lab, args.messages)
            n = 0
            for rnd in range(args.runs):
                for rtt, loss in cases:
                    control.request(lab.state_dir, "shape", **{
                        "from": "dc-a", "to": "analysis", "rtt_ms": rtt, "loss": loss})
                    for variant, overrides in variants.items():
                        n += 1
                        result = copy_once(lab, work, f"wan-{n}", args.messages, overrides)
                        rows.setdefault((rtt, loss, variant), []).append(result)
                        log(f"round {rnd + 1} rtt {rtt} ms loss {loss * 100:g} % {variant}: "
                            f"{result['msg_s']:,.0f} msg/s ({result['seconds']:.1f} s, "
                            f"steady {result['steady_msg_s']:,.0f}; first copy after "
                            f"{result['first_copy_s']:.1f} s)")
        finally:
            lab.down(timeout=30)
    table = []
    for (rtt, loss, variant), results in rows.items():
        table.append({"rtt_ms": rtt, "loss": loss, "variant": variant,
                      "msg_s": statistics.median(r["msg_s"] for r in results),
                      "mb_s": statistics.median(r["msg_s"] for r in results) * SIZE / 1e6,
                      "steady_msg_s": statistics.median(r["steady_msg_s"] for r in results),
                      "first_copy_s": statistics.median(r["first_copy_s"] for r in results),
                      "runs": [round(r["msg_s"]) for r in results]})
    base = {row["variant"]: row["msg_s"] for row in table
            if row["rtt_ms"] == 0 and row["loss"] == 0}
    steady_base = {row["variant"]: row["steady_msg_s"] for row in table
                   if row["rtt_ms"] == 0 and row["loss"] == 0}
    for row in table:
        row["of_0ms"] = row["msg_s"] / base[row["variant"]]
        row["steady_of_0ms"] = row["steady_msg_s"] / steady_base[row["variant"]]
    return {"table": table, "variants": {"A": args.a_settings, "B": args.b_settings}}


def plot(result: dict, path: str) -> None:
    """An SVG of throughput against round-trip time, one line per variant."""
    rows = [r for r in result["table"] if r["loss"] == 0]
    top = max(r["msg_s"] for r in rows) * 1.1
    rtts = sorted({r["rtt_ms"] for r in rows})
    width, height, left, bottom = 640, 360, 70, 40
    def x(rtt): return left + (width - left - 20) * rtts.index(rtt) / max(1, len(rtts) - 1)
    def y(v): return height - bottom - (height - bottom - 20) * v / top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - 10}" '
             f'y2="{height - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="20" x2="{left}" y2="{height - bottom}" stroke="black"/>',
             f'<text x="{width / 2}" y="{height - 5}" text-anchor="middle">round-trip time '
             f'dc-a - analysis (ms)</text>',
             f'<text x="15" y="{height / 2}" transform="rotate(-90 15 {height / 2})" '
             f'text-anchor="middle">mirror throughput (msg/s, 200-byte values)</text>']
    for rtt in rtts:
        parts.append(f'<text x="{x(rtt)}" y="{height - bottom + 15}" '
                     f'text-anchor="middle">{rtt}</text>')
    for i in range(5):
        v = top * i / 4
        parts.append(f'<text x="{left - 5}" y="{y(v) + 4}" text-anchor="end">'
                     f'{v / 1000:,.0f}k</text>')
    for variant, colour in (("A", "#c33"), ("B", "#36c")):
        points = sorted((r["rtt_ms"], r["msg_s"]) for r in rows if r["variant"] == variant)
        if points:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="'
                         + " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in points) + '"/>')
            parts.append(f'<text x="{width - 60}" y="{30 + 15 * (variant == "B")}" '
                         f'fill="{colour}">{variant}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def section(result: dict) -> str:
    m = result["machine"]
    a_text = " ".join(result["variants"]["A"]) or "(defaults)"
    b_text = " ".join(result["variants"]["B"]) or "(defaults)"
    lines = [f"## The mirror across a WAN (issue 29), {result['date']}", "",
             "**Method:** `bench/mirror_wan_bench.py` (`make bench-mirror-wan`, root): a lab in "
             "the netns runtime, dc-a and analysis one broker each with their own ZooKeeper, "
             f"the link between them shaped per case; {result['messages']:,} 200-byte "
             f"messages preloaded in 4 partitions of dc-a; `python -m mirror` in the "
             f"analysis datacenter copies the whole topic with a new group, timed from the "
             f"first message in the target to the last (start-up: from its start to the "
             f"first message). Variants alternate within each of "
             f"{result['runs']} rounds; medians. A = `{a_text}`; B = `{b_text}`. "
             f"\"of 0 ms\" = the "
             f"variant's rate over its own rate on the unshaped link; \"steady\" = the rate "
             f"from 10 % to 90 % of the copy (past TCP's ramp-up). Machine: "
             f"{m['nproc']} cores ({m.get('cpu_model', '?')}), Python {m['python']}.", "",
             "| round trip | loss | variant | msg/s | MB/s | of 0 ms | steady msg/s | "
             "steady of 0 ms | runs | start-up s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in sorted(result["table"], key=lambda r: (r["loss"], r["rtt_ms"], r["variant"])):
        lines.append(f"| {row['rtt_ms']} ms | {row['loss'] * 100:g} % | {row['variant']} | "
                     f"**{row['msg_s']:,.0f}** | {row['mb_s']:.0f} | {row['of_0ms']:.2f} | "
                     f"{row['steady_msg_s']:,.0f} | {row['steady_of_0ms']:.2f} | "
                     f"{', '.join(f'{r:,}' for r in row['runs'])} | "
                     f"{row['first_copy_s']:.1f} |")
    lines += ["", f"Plot: `bench/results/mirror-wan-{result['date']}.svg`; raw runs: "
                  f"`bench/results/mirror-wan-{result['date']}.json`."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mirror_wan_bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="0 and 100 ms only, one round, 100,000 messages; RESULTS.md "
                             "untouched")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--subnet", default="10.90.0.0/16")
    parser.add_argument("--a-settings", nargs="*", default=list(TODAY),
                        metavar="KEY=VALUE", help="variant A's mirror settings (default: "
                        "the mirror's settings before issue 29)")
    parser.add_argument("--b-settings", nargs="*", default=[],
                        metavar="KEY=VALUE", help="variant B's mirror settings (default: "
                        "none, the mirror's defaults)")
    parser.add_argument("--cases", nargs="*", metavar="RTT[:LOSS]",
                        help="link shapes instead of the default six (100 or 40:0.005)")
    args = parser.parse_args(argv)
    missing = missing_requirements()
    if missing:
        print(f"the network lab needs {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.quick:
        args.runs, args.messages = 1, 100_000
    result = run(args)
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    result.update(date=date, runs=args.runs, messages=args.messages, machine=machine_info())
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    if not args.quick:
        plot(result, os.path.join(os.path.dirname(__file__), "results",
                                  f"mirror-wan-{date}.svg"))
    save_results(f"mirror-wan-{date}", result, section(result), START, END,
                 write_md=not args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
