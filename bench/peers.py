"""Samsa vs RabbitMQ vs ActiveMQ: the Kafka paper's experiments (section 5,
producer test and consumer test) side by side, in one run, with plots.

    make bench-peers                        # installs what it needs, then this (~10-15 min)
    .venv/bin/python -m bench.peers         # the same, once RabbitMQ/ActiveMQ/pika/stomp.py are there
    .venv/bin/python -m bench.peers --quick # smoke run: 1 run of ~2 s tests, no RESULTS.md update
    .venv/bin/python -m bench.peers --render bench/results/peers-<date>.json  # redraw only
    .venv/bin/python -m bench.peers --help

Starts, as plain background processes on loopback with temporary data
directories, one Samsa broker, RabbitMQ (Debian's rabbitmq-server, without
its su wrapper) and ActiveMQ (Debian's activemq, STOMP connector); measures
the physical limits (loopback TCP, sequential disk write); warms each system
up with its workloads; then, for each run,
for each system in rotating order: produce batch 1, produce batch 50 (the
peers: a transaction per 50), consume everything. Stops every process it
started, also on an error or Ctrl-C. Writes bench/results/peers-<date>.json,
two plots (peers-<date>-produce.png, -consume.png) and the section between
the peers-bench markers of bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from bench import peers_report as report  # noqa: E402
from bench import peers_servers as servers  # noqa: E402
from bench import peers_workers as workers  # noqa: E402
from bench.common import (  # noqa: E402
    FETCH_BYTES, MESSAGE_BYTES, loadavg, log, machine_info, parse_result, summarize,
    system_cpu, wait_for_quiet,
)

PY_PACKAGES = {"pika": "pika", "stomp": "stomp.py", "matplotlib": "matplotlib"}
# warm-up messages per system and test (ActiveMQ's JVM needs ~50k to be warm)
WARMUP = {"samsa": {"produce_batch1": 300_000, "produce_batch50": 3_000_000},
          "rabbitmq": {"produce_batch1": 30_000, "produce_batch50": 20_000},
          "activemq": {"produce_batch1": 60_000, "produce_batch50": 30_000}}
QUICK_WARMUP = {"samsa": {"produce_batch1": 50_000, "produce_batch50": 300_000},
                "rabbitmq": {"produce_batch1": 5_000, "produce_batch50": 5_000},
                "activemq": {"produce_batch1": 20_000, "produce_batch50": 10_000}}
# at most this many messages per produce test (Samsa: 30 M x 222 bytes = 6.7 GB)
N_MAX = {"samsa": 30_000_000, "rabbitmq": 2_000_000, "activemq": 2_000_000}
BATCH = {"produce_batch1": 1, "produce_batch50": 50}


def worker_cmd(kind: str, params: dict) -> list[str]:
    return [sys.executable, "-m", "bench.peers", "--worker", kind, json.dumps(params)]


def run_worker(kind: str, params: dict, timeout: float = 900) -> dict:
    proc = subprocess.Popen(worker_cmd(kind, params), stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"{kind} worker timed out after {timeout:.0f} s"}
    except BaseException:       # interrupted: leave no worker behind
        proc.kill()
        proc.wait()
        raise
    return parse_result(kind, proc.returncode, out)


# ====================================================================== physical limits

def disk_write_speed(directory: str, mib: int = 1024) -> dict:
    """Sequential write of ``mib`` MiB with dd, fdatasync'ed before dd exits."""
    path = os.path.join(directory, "dd-test.bin")
    t0 = time.perf_counter()
    try:
        r = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}",
                            "conv=fdatasync", "status=none"], capture_output=True, text=True,
                           timeout=300)
        elapsed = time.perf_counter() - t0
    finally:
        if os.path.exists(path):
            os.unlink(path)
    if r.returncode != 0:
        return {"error": r.stderr.strip()}
    return {"bytes": mib << 20, "elapsed_s": elapsed, "mb_per_s": (mib << 20) / elapsed / 1e6}


def loopback_tcp_speed(seconds: float = 2.0, chunk: int = 4 << 20) -> dict:
    """One sender (here) and one receiver (a worker process) over 127.0.0.1,
    ``chunk``-byte sendall / recv_into; the receiver's bytes per second."""
    proc = subprocess.Popen(worker_cmd("tcp_sink", {"buffer": chunk}), stdout=subprocess.PIPE, cwd=ROOT,
                            text=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            return {"error": f"tcp sink did not start: {line!r}"}
        data = memoryview(os.urandom(chunk))
        with socket.create_connection(("127.0.0.1", int(line.split()[1]))) as s:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                s.sendall(data)
        out, _ = proc.communicate(timeout=60)
        return parse_result("tcp_sink", proc.returncode, out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def filesystem_of(path: str) -> str:
    """File system type of the mount holding ``path`` (from /proc/mounts)."""
    path = os.path.realpath(path)
    best, fstype = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and (path == parts[1] or path.startswith(
                        parts[1].rstrip("/") + "/")) and len(parts[1]) > len(best):
                    best, fstype = parts[1], parts[2]
    except OSError:
        pass
    return fstype


# ====================================================================== the benchmark

class PeersBench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.servers: dict[str, servers.Server] = {}
        self.raw: dict = {s: {t: [] for t in report.TESTS} for s in args.systems}
        self.warmup: dict = {}
        self.wait_left = args.max_wait_total
        self.n_max = dict(N_MAX)
        self.stop_notes: list[str] = []
        self.leftover: list = []

    # ----------------------------------------------------------- one measurement

    def params(self, system: str, dest: str) -> dict:
        srv = self.servers[system]
        if system == "samsa":
            return {"address": srv.address, "dest": dest}
        return {"port": srv.port, "dest": dest}

    def quiet(self) -> dict:
        """wait_for_quiet, within what is left of the run's total waiting budget
        (so that a busy machine cannot stretch the run without end)."""
        q = wait_for_quiet(min(self.a.wait_quiet, max(1.0, self.wait_left)))
        self.wait_left -= q["waited_for_quiet_s"]
        return q

    def measure(self, system: str, kind: str, params: dict) -> dict:
        """One worker run, with the brokers' CPU and the machine's around it."""
        q = self.quiet()
        cpu0 = {s: srv.cpu_seconds() for s, srv in self.servers.items()}
        busy0, _ = system_cpu()
        load = loadavg()
        t0 = time.perf_counter()
        r = run_worker(kind, params)
        window = time.perf_counter() - t0
        busy1, _ = system_cpu()
        cpu = {s: srv.cpu_seconds() - cpu0[s] for s, srv in self.servers.items()}
        r["broker_cpu_s"] = cpu[system]
        r["idle_brokers_cpu_s"] = sum(v for s, v in cpu.items() if s != system)
        r["machine_busy_cpu_s"] = busy1 - busy0
        r["other_processes_cpu_s_est"] = max(0.0, busy1 - busy0 - sum(cpu.values())
                                             - r.get("client_cpu_s", 0.0))
        r["window_s"], r["loadavg_before"] = window, load
        if r.get("n"):
            r["broker_cpu_us_per_msg"] = r["broker_cpu_s"] / r["n"] * 1e6
        r.update(q)
        return r

    # ----------------------------------------------------------- destinations

    def create(self, system: str, dest: str) -> None:
        if system == "samsa":
            from broker.client.admin import AdminClient
            with AdminClient(self.servers[system].address) as admin:
                admin.create_topic(dest, 1)

    def drop(self, system: str, dest: str) -> None:
        """Free what a run left: Samsa's topic, RabbitMQ's queue. ActiveMQ's
        queue is empty after the consume test (STOMP cannot delete it)."""
        try:
            if system == "samsa":
                from broker.client.admin import AdminClient
                with AdminClient(self.servers[system].address) as admin:
                    admin.delete_topic(dest)
            elif system == "rabbitmq":
                conn = workers.pika_connection(self.servers[system].port)
                try:
                    conn.channel().queue_delete(dest)
                finally:
                    conn.close()
        except Exception as exc:    # noqa: BLE001 - disk space only; go on
            log(f"  could not drop {system} {dest}: {exc}")

    # ----------------------------------------------------------- phases

    def measure_limits(self, workdir: str) -> dict:
        a = self.a
        out: dict = {"disk_write": {"runs": []}, "loopback_tcp": {"runs": []}}
        for _ in range(a.limit_runs):
            self.quiet()
            out["disk_write"]["runs"].append(disk_write_speed(workdir, a.dd_mib))
            self.quiet()
            out["loopback_tcp"]["runs"].append(loopback_tcp_speed(a.tcp_seconds))
        for k in out:
            out[k]["mb_per_s"] = summarize([r["mb_per_s"] for r in out[k]["runs"]
                                            if "mb_per_s" in r])
        d, t = out["disk_write"]["mb_per_s"], out["loopback_tcp"]["mb_per_s"]
        log(f"  disk write {d.get('median', 0):,.0f} MB/s, loopback TCP "
            f"{t.get('median', 0):,.0f} MB/s (medians of {a.limit_runs})")
        return out

    def start_servers(self, workdir: str) -> None:
        for system in self.a.systems:
            srv = {"samsa": servers.SamsaServer, "rabbitmq": servers.RabbitMQServer,
                   "activemq": servers.ActiveMQServer}[system](workdir)
            self.servers[system] = srv      # registered first: stopped even if start fails
            t0 = time.monotonic()
            try:
                srv.start()
            except Exception:
                log(f"{system} did not start; its output:\n{srv.log_tail()}")
                raise
            log(f"  {system} up in {time.monotonic() - t0:.1f} s (process groups "
                f"{srv.pgids()})")

    def warm_up(self, system: str) -> None:
        """Run each workload once, untimed, with a fixed number of messages:
        a cold JVM (ActiveMQ) is ~3x slower for its first ~50k messages."""
        dest = "peers-warmup"
        self.create(system, dest)
        sizes = (QUICK_WARMUP if self.a.quick else WARMUP)[system]
        self.warmup[system] = {}
        for test in ("produce_batch1", "produce_batch50"):
            r = self.measure(system, f"{system}_produce",
                             {**self.params(system, dest), "n_max": sizes[test],
                              "batch": BATCH[test]})
            if "error" in r:
                raise RuntimeError(f"{system} warm-up {test} failed: {r['error']}")
            self.warmup[system][test] = {"n": r["n"], "msgs_per_s": r["msgs_per_s"]}
            log(f"  {system} warm-up {test}: {r['n']:,} messages, {r['msgs_per_s']:,.0f} msg/s")
        total = sum(sizes.values())
        r = self.measure(system, f"{system}_consume",
                         {**self.params(system, dest), "n": total})
        if "error" in r:
            raise RuntimeError(f"{system} warm-up consume failed: {r['error']}")
        self.warmup[system]["consume"] = {"n": r["n"], "msgs_per_s": r["msgs_per_s"]}
        log(f"  {system} warm-up consume: {r['msgs_per_s']:,.0f} msg/s")
        self.drop(system, dest)

    def run_system(self, system: str, run: int) -> None:
        srv = self.servers[system]
        dest = f"peers-r{run}"
        self.create(system, dest)
        base = servers.settled_usage(srv.data_dir)
        produced = 0
        for test in ("produce_batch1", "produce_batch50"):
            limit = {"n_max": self.a.n} if self.a.n else {"n_max": self.n_max[system],
                                                           "seconds": self.a.seconds}
            r = self.measure(system, f"{system}_produce",
                             {**self.params(system, dest), **limit, "batch": BATCH[test]})
            n = r.get("n") or 1
            after = servers.settled_usage(srv.data_dir)
            r["disk_bytes"] = servers.growth(base, after)
            r["disk_bytes_per_msg"] = r["disk_bytes"] / n
            base = after
            self.record(system, test, run, r)
            if "error" in r:
                self.drop(system, dest)
                return
            produced += n
        r = self.measure(system, f"{system}_consume", {**self.params(system, dest),
                                                       "n": produced})
        self.record(system, "consume", run, r)
        self.drop(system, dest)

    def record(self, system: str, test: str, run: int, r: dict) -> None:
        r["run"] = run
        self.raw[system][test].append(r)
        if "error" in r:
            log(f"  {system:8s} {test:16s} FAILED: {r['error']}")
            return
        extra = ""
        if "disk_bytes_per_msg" in r:
            extra = f", {r['disk_bytes_per_msg']:,.0f} B/msg on disk"
        log(f"  {system:8s} {test:16s} {r['msgs_per_s']:>11,.0f} msg/s "
            f"{r['mb_per_s']:7.1f} MB/s  {r['n']:>10,} msgs in {r['elapsed_s']:5.1f} s; "
            f"broker CPU {r['broker_cpu_s']:.1f} s{extra}; others "
            f"{r['other_processes_cpu_s_est'] + r['idle_brokers_cpu_s']:.1f} CPU s")

    def run(self) -> dict:
        a = self.a
        started = dt.datetime.now(dt.timezone.utc)
        t_start = time.monotonic()
        os.makedirs(a.workdir, exist_ok=True)
        workdir = tempfile.mkdtemp(prefix="samsa-peers-", dir=a.workdir)
        # a run keeps Samsa's two produce tests on disk until its consume test:
        # use at most a third of the free space for them
        free = shutil.disk_usage(workdir).free
        self.n_max["samsa"] = max(100_000, min(N_MAX["samsa"], free // 3 // 2 // MESSAGE_BYTES))
        limits: dict = {}
        try:
            log(f"physical limits: dd {a.dd_mib} MiB into {workdir} "
                f"({filesystem_of(workdir)}), loopback TCP {a.tcp_seconds:.0f} s ...")
            limits = self.measure_limits(workdir)
            log(f"starting {', '.join(a.systems)} ...")
            self.start_servers(workdir)
            for system in a.systems:
                log(f"warm-up: {system} ...")
                self.warm_up(system)
            for run in range(1, a.runs + 1):
                k = (run - 1) % len(a.systems)      # rotate the order each run
                order = a.systems[k:] + a.systems[:k]
                log(f"run {run}/{a.runs} ({', '.join(order)}), "
                    f"{(time.monotonic() - t_start) / 60:.1f} min so far ...")
                for system in order:
                    self.run_system(system, run)
        finally:
            log("stopping the brokers ...")
            for system in reversed(list(self.servers)):
                srv = self.servers[system]
                notes = srv.stop()
                self.stop_notes += notes
                for note in notes:
                    log(f"  {note}")
            self.leftover = [pid for srv in self.servers.values() for pid in srv.leftover()]
            log("  every process stopped" if not self.leftover
                else f"  STILL RUNNING: {self.leftover}")
            shutil.rmtree(workdir, ignore_errors=True)
        finished = dt.datetime.now(dt.timezone.utc)
        summary = report.summary_of(self.raw)
        return {"started": started.isoformat(timespec="seconds"),
                "finished": finished.isoformat(timespec="seconds"),
                "duration_s": time.monotonic() - t_start, "quick": a.quick,
                "config": config_of(a, workdir), "limits": limits,
                "warmup": self.warmup, "raw": self.raw, "summary": summary,
                "ratios": report.ratios_of(summary),
                "limits_line": report.limits_line_of(limits, summary),
                "stop_notes": self.stop_notes, "leftover_processes": self.leftover}


def config_of(a: argparse.Namespace, workdir: str) -> dict:
    return {"systems": a.systems, "runs": a.runs, "seconds": a.seconds, "n_override": a.n,
            "value_bytes": 200, "samsa_log_bytes_per_msg": MESSAGE_BYTES,
            "fetch_bytes": FETCH_BYTES, "prefetch": workers.PREFETCH,
            "peer_ack_mode": "auto", "wait_quiet_s": a.wait_quiet,
            "max_wait_total_s": a.max_wait_total,
            "dd_mib": a.dd_mib, "tcp_seconds": a.tcp_seconds, "tcp_chunk_mb": 4,
            "limit_runs": a.limit_runs, "nice": a.nice, "workdir": workdir,
            "workdir_fs": filesystem_of(os.path.dirname(workdir))}


def package_versions() -> dict:
    out = {}
    for pkg in ("rabbitmq-server", "erlang-base", "activemq"):
        try:
            r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg],
                               capture_output=True, text=True, timeout=10)
            if r.returncode == 0:
                out[pkg] = r.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        r = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
        first = (r.stderr or r.stdout).splitlines()[0]
        out["java"] = first.split('"')[1] if '"' in first else first
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    from importlib import metadata
    for dist in ("pika", "stomp.py", "matplotlib"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def missing_python_packages() -> list[str]:
    missing = []
    for module, dist in PY_PACKAGES.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(dist)
    return missing


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 1 run of ~2 s tests, small warm-ups and limits; writes "
                        "bench/results/peers-<date>-quick.json (+ plots) and leaves "
                        "RESULTS.md alone")
    p.add_argument("--runs", type=int, help="runs per figure (default 3; 1 with --quick)")
    p.add_argument("--seconds", type=float,
                   help="each producer publishes for at least this long, N = what it sent "
                        "(default 12; 2 with --quick)")
    p.add_argument("--n", type=int, help="a fixed N (multiple of 50) for every system and "
                                         "produce test instead of --seconds")
    p.add_argument("--systems", default="samsa,rabbitmq,activemq",
                   help="comma-separated subset of samsa,rabbitmq,activemq")
    p.add_argument("--wait-quiet", type=float, default=60, metavar="SECONDS",
                   help="before each test wait up to this long for the machine to be idle "
                        "(default 60; 0 = never wait)")
    p.add_argument("--max-wait-total", type=float, default=300, metavar="SECONDS",
                   help="at most this much waiting for quiet in the whole run (default 300: "
                        "keeps `make bench-peers` under 20 minutes on a busy machine)")
    p.add_argument("--workdir", default=tempfile.gettempdir(),
                   help="where the temporary data directories go (default: the system's "
                        "temporary directory; must be a real disk for the disk figures)")
    p.add_argument("--nice", type=int, default=0,
                   help="run everything at this nice value (needs root for < 0)")
    p.add_argument("--no-write", action="store_true", help="print only; write no files")
    p.add_argument("--render", metavar="JSON",
                   help="measure nothing: redraw the plots and rewrite the RESULTS.md section "
                        "from a saved bench/results/peers-<date>.json")
    p.add_argument("--worker", nargs=2, metavar=("KIND", "PARAMS"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return a
    if a.n is not None and (a.n < 50 or a.n % 50):
        p.error("--n must be a positive multiple of 50")
    a.runs = a.runs or (1 if a.quick else 3)
    a.seconds = a.seconds or (2.0 if a.quick else 12.0)
    a.dd_mib = 256 if a.quick else 1024
    a.tcp_seconds = 1.0 if a.quick else 2.0
    a.limit_runs = 1 if a.quick else 3
    a.systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    unknown = set(a.systems) - set(report.SYSTEMS)
    if unknown or not a.systems:
        p.error(f"unknown systems: {', '.join(sorted(unknown))}")
    a.systems = [s for s in report.SYSTEMS if s in a.systems]     # canonical order
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.worker:
        return workers.worker_main(*a.worker)
    if a.render:
        with open(a.render) as f:
            result = json.load(f)
        write_outputs(result, a.render)
        return 0
    missing = missing_python_packages()
    if missing:
        print(f"peers.py needs the Python packages {', '.join(missing)}: run `make bench-peers` "
              "(installs the `peers` extra) or `.venv/bin/pip install -e '.[peers]'`",
              file=sys.stderr)
        return 2
    missing = servers.missing_debian_packages(a.systems)
    if missing:
        print(f"peers.py needs the Debian packages {', '.join(missing)}: run `make bench-peers` "
              f"as root (it installs them) or `sudo apt-get install {' '.join(missing)}`",
              file=sys.stderr)
        return 2
    # stop every broker on Ctrl-C and on SIGTERM/SIGHUP too (finally blocks run)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    if a.nice:
        os.setpriority(os.PRIO_PROCESS, 0, a.nice)     # inherited by brokers and workers
    machine = machine_info()
    machine["packages"] = package_versions()
    log(f"machine: {machine.get('nproc')} cores, {machine.get('cpu_model')}, load "
        f"{loadavg()}; {machine['packages']}")
    result = PeersBench(a).run()
    result["machine"] = machine
    log("summary (medians):")
    for test, r in result["ratios"].items():
        if r["ratio"] is None:
            log(f"  {test:16s} n/a")
            continue
        log(f"  {test:16s} Samsa {r['samsa']:>11,.0f} msg/s vs {r['best_peer']} "
            f"{r['best_peer_test']} {r['best_peer_msgs_per_s']:,.0f}: {r['ratio']:.0f}x "
            f"(target {r['target']:.0f}x: {'met' if r['met'] else 'MISSED'})")
    log(f"  total {result['duration_s'] / 60:.1f} min")
    if a.no_write:
        return 0 if not result["leftover_processes"] else 1
    date = result["started"][:10]
    stem = f"peers-{date}{'-quick' if a.quick else ''}"
    results_dir = os.path.join(HERE, "results")
    os.makedirs(results_dir, exist_ok=True)
    path_json = os.path.join(results_dir, stem + ".json")
    with open(path_json, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    log(f"wrote {os.path.relpath(path_json, ROOT)}")
    write_outputs(result, path_json)
    return 0 if not result["leftover_processes"] else 1


def write_outputs(result: dict, path_json: str) -> None:
    """The plots beside the JSON and, for a full run, the RESULTS.md section."""
    stem = path_json[:-len(".json")] if path_json.endswith(".json") else path_json
    pngs = {"produce": stem + "-produce.png", "consume": stem + "-consume.png"}
    report.plot(result, pngs["produce"], pngs["consume"])
    written = list(pngs.values())
    if not result.get("quick"):
        section = report.render_section(result, os.path.relpath(path_json, HERE),
                                        {k: os.path.relpath(v, HERE) for k, v in pngs.items()})
        report.write_section(os.path.join(HERE, "RESULTS.md"), section)
        written.append(os.path.join(HERE, "RESULTS.md"))
    log("wrote " + ", ".join(os.path.relpath(p, ROOT) for p in written))


if __name__ == "__main__":
    sys.exit(main())
