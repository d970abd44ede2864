"""Running small probes in the network lab's hosts (each a network
namespace): a TCP listener, connect times (counted, or streamed while a
test does something else), UDP datagrams counted, and a producer process
that reports which numbered messages were acknowledged; the tests' topology."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

from infra.local.lab import DEFAULT_TOPOLOGY
from infra.local.network import control
from infra.topology import load_topology

LISTEN = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(64)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", int(sys.argv[1])))
print("listening", flush=True)
import threading
def udp():
    while True:
        data, peer = u.recvfrom(2048); u.sendto(data, peer)
threading.Thread(target=udp, daemon=True).start()
while True:
    c, _ = s.accept(); c.close()
"""

CONNECT = """
import json, socket, sys, time
out = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter()
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[4])).close()
        out.append((time.perf_counter() - t) * 1000)
    except OSError:
        out.append(None)
print(json.dumps(out))
"""

ECHO = """
import json, socket, sys, time
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(0.005)
n, got = int(sys.argv[3]), set()
for i in range(n):
    u.sendto(str(i).encode(), (sys.argv[1], int(sys.argv[2])))
    time.sleep(0.001)
end = time.monotonic() + float(sys.argv[4])
while time.monotonic() < end:
    try:
        got.add(int(u.recv(64)))
    except socket.timeout:
        pass
print(json.dumps(len(got)))
"""

STREAM = """
import select, socket, sys, time
print("streaming", flush=True)
while not select.select([sys.stdin], [], [], 0)[0]:
    t = time.monotonic()
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
        print(t, time.monotonic(), flush=True)
    except OSError:
        print(t, "None", flush=True)
"""


def lab_topology(subnet: str, **extra):
    """The default topology on ``subnet``, dc-a and analysis 40 ms apart."""
    return load_topology(DEFAULT_TOPOLOGY, {
        "network.subnet": subnet,
        "network.links": [{"between": ["dc-a", "analysis"], "rtt_ms": 40}], **extra})


def in_host(state_dir: str, host: str, script: str, *args) -> list[str]:
    return control.enter_command(state_dir, host, [sys.executable, "-c", script,
                                                   *map(str, args)])


def listen(state_dir: str, host: str, port: int) -> subprocess.Popen:
    """A TCP listener (accepts and closes) and UDP echo on ``port`` of ``host``."""
    proc = subprocess.Popen(in_host(state_dir, host, LISTEN, port), stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "listening"
    return proc


def connect_ms(state_dir: str, host: str, address: str, port: int, times: int = 5,
               timeout: float = 1.0) -> list[float | None]:
    """TCP connect times (one round trip each) from ``host``; None: failed."""
    out = subprocess.run(in_host(state_dir, host, CONNECT, address, port, times, timeout),
                         capture_output=True, text=True, timeout=60 + times * timeout)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def echoed(state_dir: str, host: str, address: str, port: int, count: int,
           wait: float = 1.0) -> int:
    """How many of ``count`` UDP datagrams from ``host`` came back echoed."""
    out = subprocess.run(in_host(state_dir, host, ECHO, address, port, count, wait),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def address(state_dir: str, host: str) -> str:
    return control.hosts(state_dir)["hosts"][host]["address"]


# ------------------------------------------------------------------ a producer in a host

PRODUCE_NUMBERED = """
import json, sys, threading
from broker.client.producer import Producer
bootstrap, topic, round_ = sys.argv[1], sys.argv[2], int(sys.argv[3])
producer = Producer(bootstrap=bootstrap, acks="flushed", batch_size=round_, linger_ms=2)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
i = 0
while not stop.is_set():
    numbers = range(i, i + round_)
    batches = [producer.send(topic, b"m-%07d" % n) for n in numbers]
    i += round_
    acked, failed = [], []
    for n, batch in zip(numbers, batches):
        try:
            batch.result(timeout=120)
            acked.append(n)
        except Exception as exc:
            failed.append([n, repr(exc)])
    print(json.dumps({"acked": acked, "failed": failed}), flush=True)
producer.close()
print(json.dumps({"done": {"sent": i, "failed_batches": producer.failed_batches,
                           "dropped": producer.dropped_messages}}), flush=True)
"""


class NumberedProducer:
    """A producer process (broker.client.producer, acks=flushed) in ``host``
    whose only address is ``bootstrap``: it sends "m-%07d" numbered messages
    to ``topic`` in rounds of ``round_`` (a round is sent once the previous
    one is acknowledged or failed) until ``stop()``, and reports every
    message acknowledged (``acked``, with the monotonic time it was seen) or
    failed. Its log (warnings: lost connections, retries) goes to
    ``log_path``."""

    def __init__(self, state_dir: str, host: str, bootstrap: str, topic: str, log_path: str,
                 round_: int = 20) -> None:
        self.command = in_host(state_dir, host, PRODUCE_NUMBERED, bootstrap, topic, round_)
        # killed with this process, however it ends (the lab's holders are, too)
        self.command = ["setpriv", "--pdeathsig", "KILL", "--", *self.command]
        self.log_path = log_path
        self.acked: dict[int, float] = {}        # message number -> when its ack was read
        self.failed: list[tuple[int, str]] = []
        self.summary: dict | None = None
        self._lock = threading.Lock()
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, text=True,
                                         cwd=os.path.dirname(os.path.dirname(
                                             os.path.dirname(os.path.abspath(__file__)))))
        self._reader = threading.Thread(target=self._read, name="numbered-producer",
                                        daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            event = json.loads(line)
            now = time.monotonic()
            with self._lock:
                if "done" in event:
                    self.summary = event["done"]
                    continue
                for n in event["acked"]:
                    self.acked[n] = now
                self.failed += [tuple(f) for f in event["failed"]]

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def last_acked(self) -> int:
        """The highest message number acknowledged so far (-1: none)."""
        with self._lock:
            return max(self.acked, default=-1)

    def ack_times(self) -> list[float]:
        """When each acknowledgement was read, in order (monotonic)."""
        with self._lock:
            return sorted(self.acked.values())

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, timeout: float = 60.0) -> dict:
        """Stop sending, close the producer (what is queued is flushed), wait
        for the process; its summary (sent, failed_batches, dropped)."""
        self.proc.stdin.close()
        assert self.proc.wait(timeout) == 0, self.log()[-3000:]
        self._reader.join(timeout)
        assert self.summary is not None, self.log()[-3000:]
        return self.summary

    def kill(self) -> None:
        """At teardown: gone for sure, whatever state it is in."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)        # its stdout ended with it
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class ConnectStream:
    """TCP connects from ``host`` to ``address``:``port``, one after another
    until stop(); each one's start and end on this machine's monotonic clock
    (the same in every namespace), end None for a failed one."""

    def __init__(self, state_dir: str, host: str, address: str, port: int,
                 timeout: float = 5.0) -> None:
        self.proc = subprocess.Popen(in_host(state_dir, host, STREAM, address, port, timeout),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "streaming"

    def next(self) -> tuple[float, float | None]:
        """The next connect's (start, end); waits for it to end."""
        start, end = self.proc.stdout.readline().split()
        return float(start), None if end == "None" else float(end)

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
