"""The broker's produce path in one process: CPU time per produce request.

    python -m bench.produce_path [--requests 200000] [--repeat 7]

Runs a real ``BrokerServer`` (a temporary data directory) and feeds one
connection's ``data_received`` with pipelined Produce requests of one
200-byte message each (acks=none, as the batch-1 benchmark sends them), in
reads of 64 KiB, as a socket would deliver them. No client, no socket: what
it times is the broker's own work per request (framing, decoding,
validation, append, the write of each read), so an A/B of two checkouts
(``PYTHONPATH=<checkout> python -m bench.produce_path``) is not at the
mercy of a client sharing the two cores. Prints the median and the spread
of ``--repeat`` timings, in microseconds of process CPU per request.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

from broker.config import BrokerConfig
from broker.protocol import api
from broker.protocol.message import encode_message_set
from broker.server.connection import Connection
from broker.server.server import BrokerServer

READ_BYTES = 64 * 1024


class NullTransport:
    """What the connection asks of an asyncio transport; writes go nowhere."""

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default

    def write(self, data) -> None:
        pass

    def writelines(self, data) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        pass


def produce_stream(requests: int) -> list[bytes]:
    """``requests`` Produce frames of one message each, cut into 64 KiB reads."""
    value = os.urandom(200)
    frames = []
    for i in range(requests):
        message_set = encode_message_set([(None, value, 1_700_000_000_000 + i)])
        request = api.ProduceRequest(0, 1000, (api.ProduceEntry("bench", 0, message_set),))
        frames.append(api.encode_request(request, i + 1, "bench"))
    stream = b"".join(frames)
    return [stream[i:i + READ_BYTES] for i in range(0, len(stream), READ_BYTES)]


async def one_timing(data_dir: str, reads: list[bytes], requests: int) -> float:
    server = BrokerServer(BrokerConfig(port=0, metrics_port=-1, data_dir=data_dir))
    await server.start()
    try:
        conn = Connection(server)
        conn.connection_made(NullTransport())
        t0 = time.process_time()
        for chunk in reads:
            conn.data_received(chunk)
        elapsed = time.process_time() - t0
        conn.connection_lost(None)
    finally:
        await server.shutdown("benchmark over")
    return elapsed / requests * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    a = p.parse_args(argv)
    reads = produce_stream(a.requests)
    timings = []
    for _ in range(a.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            timings.append(asyncio.run(one_timing(os.path.join(tmp, "data"), reads,
                                                  a.requests)))
    result = {"us_per_request_median": statistics.median(timings),
              "us_per_request": timings, "requests": a.requests,
              "python": sys.version.split()[0]}
    if a.json:
        print(json.dumps(result))
    else:
        print(f"{statistics.median(timings):.3f} us CPU per produce request (median of "
              f"{a.repeat}: {', '.join(f'{t:.3f}' for t in timings)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
