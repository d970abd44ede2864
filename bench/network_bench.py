"""What the network lab's router carries (issue 29, point 1: "measure what
it can carry"), on this machine.

    .venv/bin/python -m bench.network_bench              # full run (~3 min), root
    .venv/bin/python -m bench.network_bench --quick      # smoke run, no RESULTS.md update

For each MTU (1500, 9000, 65000) a network lab of two datacenters is built
(infra/local/network); one TCP stream, a Python sender in dc-a's client
host and a receiver in analysis's, sockets of 32 MiB each way (so that the
window does not bound a long link), sends for --seconds through:

  bridge     two hosts of one datacenter: the kernel alone (no delayer);
  rtt N      the router's link dc-a -> analysis shaped to N ms round trip
             (0, 10, 40, 100, 200), every packet through the Python delayer.

Figures per case: MB/s (median of --runs), and the keeper's (router's) CPU
seconds per GB carried. Writes bench/results/network-<UTC date>.json and the
network-bench section of bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile

from bench.common import log, machine_info, proc_cpu_seconds, save_results
from infra.local.lab import DEFAULT_TOPOLOGY
from infra.local.network import control
from infra.local.network.runner import NetworkLab, missing_requirements
from infra.topology import load_topology

START = "<!-- network-bench:start -->"
END = "<!-- network-bench:end -->"
PORT = 7200
BUFFER = 32 << 20

RECEIVE = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, 33, %d)        # SO_RCVBUFFORCE
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0
while True:
    d = c.recv(1 << 20)
    if not d: break
    n += len(d)
c.sendall(b"k"); print(n, flush=True)
""" % BUFFER

SEND = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, 32, %d)   # SO_SNDBUFFORCE
s.connect((sys.argv[1], int(sys.argv[2]))); buf = b"x" * (1 << 18); n = 0
t = time.perf_counter(); end = t + float(sys.argv[3])
while time.perf_counter() < end:
    s.sendall(buf); n += len(buf)
s.shutdown(socket.SHUT_WR); s.recv(1); elapsed = time.perf_counter() - t
print(n, elapsed, flush=True)
""" % BUFFER


def stream(state_dir: str, sender: str, receiver: str, seconds: float) -> float:
    """MB/s of one TCP stream from ``sender`` to ``receiver`` (hosts)."""
    address = control.hosts(state_dir)["hosts"][receiver]["address"]
    rx = subprocess.Popen(control.enter_command(state_dir, receiver,
                                                [sys.executable, "-c", RECEIVE, str(PORT)]),
                          stdout=subprocess.PIPE, text=True)
    try:
        assert rx.stdout.readline().strip() == "ready"
        out = subprocess.run(control.enter_command(state_dir, sender, [
            sys.executable, "-c", SEND, address, str(PORT), str(seconds)]),
            capture_output=True, text=True, timeout=seconds + 120, check=True)
        sent, elapsed = out.stdout.split()
        received = int(rx.stdout.readline())
        assert received == int(sent), (received, sent)
        return int(sent) / float(elapsed) / 1e6
    finally:
        rx.kill()
        rx.wait()


def measure(mtu: int, rtts: list[int], runs: int, seconds: float) -> list[dict]:
    topology = load_topology(DEFAULT_TOPOLOGY, {"network.subnet": "10.86.0.0/16",
                                                "network.mtu": str(mtu),
                                                "network.links": [{"between": ["dc-a",
                                                                               "analysis"]}]})
    with tempfile.TemporaryDirectory(prefix="samsa-network-bench-") as state_dir:
        lab = NetworkLab(state_dir)
        document = lab.up(topology)
        keeper = document["keeper"]
        rows = []
        try:
            cases = [("bridge", None)] + [(f"rtt {rtt} ms", rtt) for rtt in rtts]
            for name, rtt in cases:
                rates, cpu_per_gb = [], []
                if rtt is not None:
                    control.request(state_dir, "shape", **{"from": "dc-a", "to": "analysis",
                                                           "rtt_ms": rtt})
                receiver = "dc-a.broker-0" if rtt is None else "analysis.client"
                for _ in range(runs):
                    before = proc_cpu_seconds(keeper)
                    rate = stream(state_dir, "dc-a.client", receiver, seconds)
                    cpu = proc_cpu_seconds(keeper) - before
                    rates.append(rate)
                    cpu_per_gb.append(cpu / (rate * seconds / 1000))
                row = {"mtu": mtu, "case": name, "rtt_ms": rtt,
                       "mb_per_s": statistics.median(rates), "runs": rates,
                       "router_cpu_s_per_gb": statistics.median(cpu_per_gb)}
                log(f"mtu {mtu} {name}: {row['mb_per_s']:.0f} MB/s "
                    f"(runs {', '.join(f'{r:.0f}' for r in rates)}), router "
                    f"{row['router_cpu_s_per_gb']:.2f} CPU s/GB")
                rows.append(row)
        finally:
            lab.down()
        return rows


def section(result: dict) -> str:
    lines = [f"## The network lab's router (issue 29), {result['date']}", "",
             "**Method:** `bench/network_bench.py` (`make bench-network`, root): for each MTU "
             "a network lab of the default topology (infra/local/network); one TCP stream "
             f"from a Python sender in `dc-a.client` to a receiver, {result['seconds']:g} s, "
             "32 MiB socket buffers; `bridge`: to a host of the same datacenter (the "
             "kernel's bridge only); `rtt N`: to `analysis.client` through the router's "
             "link shaped to N ms, every packet read, held and written back by the Python "
             f"delayer. Medians of {result['runs']} runs; router CPU = the keeper "
             f"process's CPU seconds per GB carried. Machine: {result['machine']['nproc']} "
             f"cores ({result['machine'].get('cpu_model', '?')}), Python "
             f"{result['machine']['python']}, kernel {result['machine']['kernel']}.", "",
             "| MTU | path | MB/s | runs | router CPU s/GB |", "|---|---|---|---|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['mtu']} | {row['case']} | **{row['mb_per_s']:.0f}** | "
                     f"{', '.join(f'{r:.0f}' for r in row['runs'])} | "
                     f"{row['router_cpu_s_per_gb']:.2f} |")
    lines += ["", "What the router carries is the 0 ms row (the delayer's CPU per GB is the "
              "same at every round trip); the longer links' rows are one TCP stream's "
              "ramp-up within the run (slow start needs many round trips to open a window "
              "of rate x round trip), not the router's limit. Every MTU runs with TCP "
              "segmentation offload into the router (docs/network-lab.md).",
              "", f"Raw runs: `bench/results/network-{result['date']}.json`."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.network_bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one MTU, two links, short runs; "
                                                              "RESULTS.md untouched")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args(argv)
    missing = missing_requirements()
    if missing:
        print(f"the network lab needs {', '.join(missing)}", file=sys.stderr)
        return 2
    mtus, rtts = ([1500], [0, 40]) if args.quick else ([1500, 9000, 65000],
                                                       [0, 10, 40, 100, 200])
    runs, seconds = (1, 1.0) if args.quick else (args.runs, args.seconds)
    rows = []
    for mtu in mtus:
        rows += measure(mtu, rtts, runs, seconds)
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    result = {"date": date, "runs": runs, "seconds": seconds, "rows": rows,
              "machine": machine_info()}
    save_results(f"network-{date}", result, section(result), START, END,
                 write_md=not args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
