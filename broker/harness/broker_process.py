"""Start and stop real broker processes (for the demo, the tests and the benchmarks).

A ``BrokerProcess`` runs ``python -m broker`` with JSON logs, waits for its
"started" event (which carries the port it bound: pass port 0 for a free
one), keeps its log in ``<data dir>.log`` and stops it with SIGTERM (clean)
or SIGKILL (crash).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading


class BrokerStartError(RuntimeError):
    pass


class BrokerProcess:
    def __init__(self, data_dir: str, port: int = 0, metrics_port: int = -1,
                 settings: dict[str, object] | None = None, broker_id: int = 0,
                 log_path: str | None = None) -> None:
        self.data_dir = data_dir
        self.requested_port = port
        self.requested_metrics_port = metrics_port
        self.settings = dict(settings or {})
        self.broker_id = broker_id
        self.log_path = log_path or data_dir.rstrip("/") + ".log"
        self.port: int | None = None
        self.metrics_port: int | None = None
        self.proc: subprocess.Popen | None = None
        self._started = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        port = self.port if self.port else self.requested_port
        cmd = [sys.executable, "-m", "broker", "--port", str(port), "--data-dir", self.data_dir,
               "--broker-id", str(self.broker_id),
               "--metrics-port", str(self.metrics_port if self.metrics_port else
                                     self.requested_metrics_port),
               "--log-format", "json"]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        """Start (or restart on the same port) and wait until it serves."""
        if self._reader is not None:
            self._reader.join(timeout=10)    # the last process's log is all written
        # a fresh event per process: the previous process's log reader must
        # not signal "started" for this one
        self._started = started = threading.Event()
        log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self._reader = threading.Thread(target=self._read_log,
                                        args=(self.proc, log_file, started), daemon=True)
        self._reader.start()
        if not started.wait(timeout) or self.proc.poll() is not None:
            self.kill()
            raise BrokerStartError(f"broker did not start; log:\n{self.tail_log()}")
        return self

    def _read_log(self, proc: subprocess.Popen, log_file, started: threading.Event) -> None:
        with log_file:
            for line in proc.stderr:
                log_file.write(line)
                log_file.flush()
                if not started.is_set() and b'"event": "started"' in line:
                    try:
                        event = json.loads(line)
                        self.port = int(event["port"])
                        self.metrics_port = event.get("metrics_port")
                    except (ValueError, KeyError):
                        continue
                    started.set()
        started.set()     # the process ended: unblock start()

    def tail_log(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-lines:]).decode(errors="replace")
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait: the broker flushes and checkpoints."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        if self._reader is not None:
            self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed that was not already."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill() if exc[0] else self.stop()
