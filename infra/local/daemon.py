"""python -m infra.local.daemon up|down: one service of the local environment
(e.g. the audit service) run detached, found again by its state directory.

    python -m infra.local.daemon up --dir D --name audit --ready-url http://127.0.0.1:8090/healthz \
        -- python -m audit serve --zookeeper 127.0.0.1:19000/analysis --http-port 8090
    python -m infra.local.daemon down --dir D

``up`` starts the command in a session of its own (its output in
``D/logs/NAME.log``), records it in ``D/daemon.json`` and waits until the
ready URL answers (or the process exits: the error shows its log's end);
``down`` stops its process group (SIGTERM, SIGKILL after a timeout). The
lab's brokers, load balancers and mirrors have ``python -m infra.local
up --only``; this is for the services the lab does not run.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.request

from broker.harness.process import SupervisedProcess, proc_stat, signal_group, tail

STATE_FILE = "daemon.json"


class DaemonError(RuntimeError):
    pass


def _alive(record: dict) -> bool:
    stat = proc_stat(record["pid"])
    return stat is not None and stat.start_ticks == record["start_ticks"] and \
        stat.state not in "ZX"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def up(state_dir: str, name: str, command: list[str], ready_url: str = "",
       timeout: float = 60.0) -> dict:
    state_dir = os.path.abspath(state_dir)
    path = os.path.join(state_dir, STATE_FILE)
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
        if _alive(old):
            raise DaemonError(f"{old['name']} already runs from {state_dir} (pid {old['pid']})")
    log_path = os.path.join(state_dir, "logs", f"{name}.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    proc = SupervisedProcess(name, command, log_path, cwd=state_dir).start()
    stat = proc_stat(proc.pid)
    record = {"name": name, "pid": proc.pid, "start_ticks": stat.start_ticks if stat else -1,
              "command": command, "log": log_path, "ready_url": ready_url}
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=1)
    os.replace(path + ".tmp", path)
    deadline = time.monotonic() + timeout
    while ready_url and not _answers(ready_url):
        if proc.poll() is not None:
            raise DaemonError(f"{name} {proc.exit_status()}; the end of {log_path}:\n"
                              + tail(log_path, 30))
        if time.monotonic() > deadline:
            down(state_dir)
            raise DaemonError(f"{name}: {ready_url} did not answer in {timeout:.0f} s; the end "
                              f"of {log_path}:\n" + tail(log_path, 30))
        time.sleep(0.2)
    return record


def down(state_dir: str, timeout: float = 15.0) -> bool:
    """Stop the service of ``state_dir``; whether it was running."""
    path = os.path.join(os.path.abspath(state_dir), STATE_FILE)
    try:
        with open(path) as f:
            record = json.load(f)
    except FileNotFoundError:
        return False
    running = _alive(record)
    if running:
        signal_group(record["pid"], signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(record) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(record):
            signal_group(record["pid"], signal.SIGKILL)
    os.remove(path)
    return running


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infra.local.daemon", description=__doc__,
                                usage="%(prog)s {up,down} --dir DIR [options] [-- COMMAND ...]",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["up", "down"])
    p.add_argument("--dir", required=True, help="the service's state directory")
    p.add_argument("--name", default="service", help="its name (logs/NAME.log)")
    p.add_argument("--ready-url", default="", help="ready once this URL answers 200")
    p.add_argument("--timeout", type=float, default=60.0)
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:split])
    command = argv[split + 1:]
    try:
        if args.action == "up":
            if not command:
                p.error("up needs a command after --")
            record = up(args.dir, args.name, command, args.ready_url, args.timeout)
            print(f"{record['name']} is up (pid {record['pid']}), log {record['log']}")
        else:
            was = down(args.dir, args.timeout)
            print("stopped" if was else f"nothing running from {args.dir}")
    except DaemonError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
