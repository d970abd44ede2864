"""What Samsa's benchmarks share: the workload's constants, the machine's
description, CPU accounting from /proc, waiting for an idle machine,
summaries (median, min, max), and the RESULTS.md section writer.

Imported by every benchmark as ``bench.common``; holds no benchmark itself.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

VALUE_SIZE = 200
MESSAGE_OVERHEAD = 22           # length, crc, magic, attributes, timestamp, key length
MESSAGE_BYTES = VALUE_SIZE + MESSAGE_OVERHEAD
DISTINCT_VALUES = 1024          # pre-generated random values, reused cyclically
FETCH_BYTES = 200 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def proc_cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) seconds of a process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    fields = data[data.rindex(b")") + 2:].split()   # fields[0] is field 3 (state)
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads)."""
    return sum(proc_cpu_times(pid))


def system_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    total = sum(fields)
    idle = fields[3] + fields[4]
    return (total - idle) / CLK_TCK, total / CLK_TCK


def wait_for_quiet(max_wait: float, threshold: float = 0.15) -> dict:
    """Wait (up to max_wait s) until the machine is mostly idle over 1 s:
    other jobs on these 2 cores skew every figure. Returns what was seen."""
    t0 = time.monotonic()
    while True:
        b0, a0 = system_cpu()
        time.sleep(1.0)
        b1, a1 = system_cpu()
        busy = (b1 - b0) / max(a1 - a0, 1e-9)
        waited = time.monotonic() - t0
        if busy <= threshold or waited >= max_wait:
            if busy > threshold:
                log(f"  machine still {busy:.0%} busy after {waited:.0f} s; measuring anyway")
            return {"busy_fraction_before": round(busy, 3), "waited_for_quiet_s": round(waited, 1)}


class Window:
    """Broker CPU and machine-wide CPU over a test: what the broker used, and
    (busy - broker - client) roughly what other processes took."""

    def __init__(self, broker_pid: int) -> None:
        self.pid = broker_pid
        self.broker0 = proc_cpu_times(broker_pid)
        self.busy0, self.total0 = system_cpu()
        self.t0 = time.perf_counter()
        self.load = loadavg()

    def close(self, result: dict, client_cpu: float | None = None) -> float:
        user, system = proc_cpu_times(self.pid)
        user, system = user - self.broker0[0], system - self.broker0[1]
        broker = user + system
        busy1, total1 = system_cpu()
        result["broker_cpu_s"] = broker
        result["broker_user_s"], result["broker_system_s"] = user, system
        result["machine_busy_cpu_s"] = busy1 - self.busy0
        result["window_s"] = time.perf_counter() - self.t0
        if client_cpu is not None:
            result["other_processes_cpu_s_est"] = max(0.0, busy1 - self.busy0 - broker
                                                      - client_cpu)
        result["loadavg_before"] = self.load
        return broker


def loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def summarize(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": len(values)} if values else {}


def print_round(number: int, total: int, row: dict, fmt: str) -> None:
    """One line for a round of A/B figures: ``round N/T: name value, ...``
    (``fmt`` formats each value; keys not holding numbers are left out)."""
    print(f"round {number}/{total}: " + ", ".join(
        f"{name} {format(value, fmt)}" for name, value in row.items()
        if isinstance(value, (int, float)) and name != "round"), flush=True)


def compare_rounds(rounds: list[dict], base: str, other: str) -> dict:
    """The medians of two figures over rounds, the ratio of the medians and
    the median of the rounds' own ratios (other / base)."""
    base_median = statistics.median(row[base] for row in rounds)
    other_median = statistics.median(row[other] for row in rounds)
    return {"base": base_median, "other": other_median, "ratio": other_median / base_median,
            "ratio_median_of_rounds": statistics.median(row[other] / row[base]
                                                        for row in rounds)}


def machine_info() -> dict:
    info: dict = {"nproc": os.cpu_count(), "python": sys.version.split()[0],
                  "python_impl": platform.python_implementation(),
                  "kernel": platform.release(), "hostname": platform.node()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    info["mem_total_gib"] = round(int(line.split()[1]) / (1 << 20), 1)
                    break
    except OSError:
        pass
    try:
        info["nproc_online"] = int(subprocess.run(["nproc"], capture_output=True, text=True)
                                   .stdout.strip())
    except (OSError, ValueError):
        pass
    from broker.protocol import message
    info["c_accelerator"] = bool(message.ACCELERATED)
    info["git"] = git_state()
    return info


def git_state() -> dict:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    diff = git("diff", "HEAD", "--", "broker")
    return {"head": git("rev-parse", "--short", "HEAD"),
            "broker_dirty": bool(diff),
            "broker_diff_sha1": hashlib.sha1(diff.encode()).hexdigest()[:12] if diff else None}


def random_values(n: int = DISTINCT_VALUES, size: int = VALUE_SIZE) -> list[bytes]:
    return [os.urandom(size) for _ in range(n)]


def parse_result(kind: str, returncode: int, stdout: str) -> dict:
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": f"{kind} worker exited {returncode} without a result"}


def replace_section(text: str, section: str, start: str, end: str) -> str:
    """``text`` with what lies between the markers replaced by ``section``
    (markers appended at the end when absent); the rest is left untouched.
    Every benchmark owns one marked section of bench/RESULTS.md."""
    block = start + "\n" + section.rstrip("\n") + "\n" + end
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        return head + block + tail
    return text.rstrip("\n") + "\n\n" + block + "\n"


def write_section(path_md: str, section: str, start: str, end: str) -> None:
    text = ""
    if os.path.exists(path_md):
        with open(path_md) as f:
            text = f.read()
    with open(path_md, "w") as f:
        f.write(replace_section(text, section, start, end))


def save_results(name: str, result: dict, section: str, start: str, end: str,
                 write_md: bool = True) -> None:
    """bench/results/<name>.json, the section printed, and (unless told not
    to) put into its markers in bench/RESULTS.md."""
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(section)
    if write_md:
        write_section(os.path.join(HERE, "RESULTS.md"), section, start, end)
