"""Start and stop real broker processes (for the demo, the tests and the benchmarks).

A ``BrokerProcess`` runs ``python -m broker`` with JSON logs as a
``SupervisedProcess`` (broker/service_kit/process.py), waits for its
"started" event (which carries the port it bound: pass port 0 for a free
one), keeps its log in ``<data dir>.log`` and stops it with SIGTERM (clean)
or SIGKILL (crash).
"""
from __future__ import annotations

import json
import subprocess
import sys

from broker.service_kit.process import ProcessStartError, SupervisedProcess


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
        self.tls_port: int | None = None       # with the setting tls_port (kept on restarts)
        self.process: SupervisedProcess | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def tls_address(self) -> str:
        """The TLS listener's (the setting tls_port)."""
        if not self.tls_port:
            raise RuntimeError("this broker has no TLS listener (settings: tls_port)")
        return f"127.0.0.1:{self.tls_port}"

    @property
    def proc(self) -> subprocess.Popen | None:
        """The running (or last) process."""
        return self.process.proc if self.process is not None else None

    def command(self) -> list[str]:
        port = self.port if self.port else self.requested_port
        cmd = [sys.executable, "-m", "broker", "--port", str(port), "--data-dir", self.data_dir,
               "--broker-id", str(self.broker_id),
               "--metrics-port", str(self.metrics_port if self.metrics_port else
                                     self.requested_metrics_port),
               "--log-format", "json"]
        settings = dict(self.settings)
        if self.tls_port:
            settings["tls_port"] = self.tls_port    # a restart binds the same TLS port
        for key, value in settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def _started_event(self, line: bytes) -> bool:
        if b'"event": "started"' not in line:
            return False
        try:
            event = json.loads(line)
            self.port = int(event["port"])
            self.metrics_port = event.get("metrics_port")
            self.tls_port = event.get("tls_port")
        except (ValueError, KeyError):
            return False
        return True

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        """Start (or restart on the same port) and wait until it serves."""
        self.process = SupervisedProcess(f"broker-{self.broker_id}", self.command(),
                                         self.log_path)
        self.process.start(ready_line=self._started_event)
        try:
            self.process.wait_ready(timeout)
        except ProcessStartError as exc:
            raise BrokerStartError(f"broker did not start: {exc}") from None
        return self

    def tail_log(self, lines: int = 40) -> str:
        if self.process is None:
            return "(no log)"
        return self.process.tail_log(lines)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait: the broker flushes and checkpoints. The exit
        status: 0 for a clean stop (-9 if it had to be killed after ``timeout``)."""
        if self.process is None:
            return None
        return self.process.stop(timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed that was not already."""
        if self.process is not None:
            self.process.kill()

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill() if exc[0] else self.stop()
