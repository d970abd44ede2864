"""What a misbehaving client costs the broker (issue 9): broker RSS growth and
another client's worst request latency while one client

  * pipelines 50,000 fetches without reading the replies,
  * holds 30 partial 4 MiB request frames open,
  * sends 30 gzip wrappers that inflate to 63 MiB each.

    python -m bench.abuse [--checkout DIR]

Runs a broker of this checkout (or of DIR, e.g. an older commit's worktree,
for a before/after in one run) with default settings, on this machine.
Prints one line per case; numbers, not pass/fail (the tests in
tests/server/test_backpressure.py and test_server_hardening.py assert bounds).
"""
from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import tempfile
import threading
import time
import zlib


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkout", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), help="the checkout whose broker runs (default: this one)")
    a = p.parse_args(argv)
    a.checkout = os.path.abspath(a.checkout)
    sys.path.insert(0, a.checkout)
    os.environ["PYTHONPATH"] = a.checkout
    os.chdir(a.checkout)          # `python -m broker` puts the working directory first
    from broker.harness.broker_process import BrokerProcess
    from broker.client.connection import BrokerConnection
    from broker.protocol import api
    from broker.protocol.message import encode_message, encode_message_set

    def worst_latency(address: str, seconds: float, stop: threading.Event) -> list[float]:
        host, port = address.split(":")
        out = []
        conn = BrokerConnection(host, int(port), "watcher", request_timeout=60)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not stop.is_set():
            t = time.monotonic()
            conn.request(api.MetadataRequest(()))
            out.append(time.monotonic() - t)
        conn.close()
        return out

    def watch(address, fn, seconds=8.0):
        stop = threading.Event()
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("lat", worst_latency(
            address, seconds, stop)))
        t.start()
        try:
            fn()
        finally:
            time.sleep(0.5)
            stop.set()
            t.join()
        return max(result.get("lat", [0]))

    with tempfile.TemporaryDirectory() as d, BrokerProcess(data_dir=d, port=0) as broker:
        host, port = broker.address.split(":")
        pid = broker.proc.pid
        conn = BrokerConnection(host, int(port), "setup")
        end = conn.request(api.ProduceRequest(2, 30000, (api.ProduceEntry(
            "abuse", 0, encode_message_set((None, b"x" * 1000, 1) for _ in range(500))),))
            ).results[0].end_offset
        conn.close()

        def pipelined():
            # long polls at the end of the log: parked, so no reply is written
            # (a written reply would stop the reading by TCP's own flow control)
            s = socket.create_connection((host, int(port)))
            frames = b"".join(api.encode_request(api.FetchRequest(30_000, 1, (
                api.FetchEntry("abuse", 0, end, 4096),)), i, "abuser") for i in range(50_000))
            sender = threading.Thread(target=lambda: _sendall(s, frames), daemon=True)
            sender.start()
            time.sleep(5)
            print(f"  50,000 pipelined long-poll fetches: broker RSS "
                  f"{rss_mb(pid) - before:+.0f} MB", flush=True)
            s.close()

        def partial_frames():
            socks = []
            head = struct.pack(">ihhi", 4 << 20, 3, 0, 1)
            for _ in range(30):
                s = socket.create_connection((host, int(port)))
                socks.append(s)
                threading.Thread(target=lambda s=s: _sendall(s, head + bytes(3 << 20)),
                                 daemon=True).start()
            time.sleep(5)
            print(f"  30 partial 4 MiB frames: broker RSS {rss_mb(pid) - before:+.0f} MB",
                  flush=True)
            for s in socks:
                s.close()

        def bombs():
            c = zlib.compressobj(9, zlib.DEFLATED, 31)
            payload = b"".join(c.compress(bytes(1 << 20)) for _ in range(63)) + c.flush()
            bomb = encode_message(payload, None, 1, codec=1)
            frame = api.encode_request(api.ProduceRequest(1, 30000, (
                api.ProduceEntry("abuse", 0, bomb),)), 1, "abuser")
            s = socket.create_connection((host, int(port)))
            s.sendall(frame * 30)
            got = 0
            buf = b""
            while got < 30:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                    buf = buf[4 + struct.unpack_from(">i", buf)[0]:]
                    got += 1
            s.close()

        for name, fn in (("pipelined fetches", pipelined), ("partial frames", partial_frames),
                         ("gzip bombs", bombs)):
            before = rss_mb(pid)
            worst = watch(broker.address, fn)
            print(f"{name}: another client's worst metadata latency {worst * 1000:.0f} ms; "
                  f"broker RSS now {rss_mb(pid):.0f} MB", flush=True)
    return 0


def _sendall(sock, data) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
