"""Running small probes in the network lab's hosts (each a network
namespace): a TCP listener, connect times, UDP datagrams counted."""
from __future__ import annotations

import json
import subprocess
import sys

from infra.local.network import control

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
