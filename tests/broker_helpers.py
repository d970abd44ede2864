"""Helpers shared by the integration tests (tests/server, tests/client,
tests/tools): talk to a real broker over a real socket with nothing but the
codec, read a partition back whole, scrape /metrics, run the command-line
programs, and poll a condition with a deadline when no event announces it.

Plain functions, so any test can use them; the fixtures that start brokers
live in tests/conftest.py. Never reaches into a broker's memory: only its
sockets, its metrics endpoint and its log file.
"""
from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Callable, Iterable, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.client.connection import BrokerConnection, parse_address
from broker.service_kit.ports import free_ports
from broker.protocol import api
from broker.protocol.api import Acks
from broker.protocol.errors import ErrorCode
from broker.protocol.message import Message, decode_message_set, encode_message_set

T = TypeVar("T")

# Timestamps near "now" (in ms): far from retention.ms, so no retention run
# can delete what a test wrote.
NOW_MS = time.time_ns() // 1_000_000

# Broker settings under which no flush happens by itself: only a produce
# with acks=flushed (or a clean shutdown) makes messages visible.
NEVER_FLUSH = {"log.flush_ms": 100_000, "log.flush_messages": 1_000_000}


def wait_until(condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.01,
               what: str | Callable[[], str] = "the condition") -> T:
    """Poll ``condition`` until it returns something truthy (returned); fail the
    test after ``timeout`` seconds, saying ``what`` (a callable: what it
    returns then, to show the state at the time-out). Only for states no
    event announces."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout}s waiting for "
                        f"{what() if callable(what) else what}")
        time.sleep(interval)


# ------------------------------------------------------------------ the wire, by hand

def connect(address: str, request_timeout: float = 30.0) -> BrokerConnection:
    host, port = parse_address(address)
    conn = BrokerConnection(host, port, "samsa-tests", request_timeout=request_timeout)
    conn.connect()
    return conn


def scram_connection(address: str, user: str, password: str,
                     request_timeout: float = 10.0) -> BrokerConnection:
    """A connection to ``address`` that has logged in as ``user`` with SCRAM."""
    from broker.client.authentication import SaslLogin
    host, port = parse_address(address)
    conn = BrokerConnection(host, port, "tests", request_timeout=request_timeout,
                            sasl=SaslLogin(user, password))
    conn.connect()
    return conn


def message_set(values: Iterable[bytes], key: bytes | None = None,
                timestamp: int = NOW_MS) -> bytes:
    """An uncompressed message set of ``values``, all with ``key``."""
    return encode_message_set((key, v, timestamp) for v in values)


def produce(conn: BrokerConnection, topic: str, partition: int, data: bytes,
            acks: Acks = Acks.FLUSHED, timeout_ms: int = 30_000) -> api.ProduceResult:
    """One produce request of one message set; its result (errors not raised)."""
    resp = conn.request(api.ProduceRequest(acks, timeout_ms,
                                           (api.ProduceEntry(topic, partition, data),)))
    assert len(resp.results) == 1
    return resp.results[0]


def fetch(conn: BrokerConnection, topic: str, partition: int, offset: int,
          max_bytes: int = 1 << 20, max_wait_ms: int = 0, min_bytes: int = 1
          ) -> api.FetchResult:
    """One fetch of one partition; its result (errors not raised)."""
    resp = conn.request(api.FetchRequest(max_wait_ms, min_bytes,
                                         (api.FetchEntry(topic, partition, offset, max_bytes),)))
    assert len(resp.results) == 1
    return resp.results[0]


def read_partition(conn: BrokerConnection, topic: str, partition: int, start: int = 0,
                   max_bytes: int = 1 << 20) -> list[Message]:
    """Every visible message of a partition from ``start`` to its high watermark."""
    out: list[Message] = []
    offset = start
    while True:
        r = fetch(conn, topic, partition, offset, max_bytes)
        assert r.error == 0, f"fetch {topic}/{partition}@{offset}: {r.message}"
        if offset >= r.high_watermark:
            return out
        messages, used = decode_message_set(r.message_set, offset, True, topic, partition)
        assert used > 0, f"no whole message at {topic}/{partition}@{offset} in {max_bytes} bytes"
        out += messages
        offset += used


def high_watermark(conn: BrokerConnection, topic: str, partition: int) -> int:
    r = fetch(conn, topic, partition, 0, max_bytes=0)
    assert r.error == 0, r.message
    return r.high_watermark


def log_sizes(conn: BrokerConnection, topic: str) -> list[int]:
    """Bytes held per partition, flushed or not (the metadata's size_bytes):
    what shows whether anything at all was appended."""
    info = conn.request(api.MetadataRequest((topic,))).topics[0]
    assert info.error == 0, info.message
    return [p.size_bytes for p in info.partitions]


# ------------------------------------------------------------------ raw sockets

_SIZE = struct.Struct(">i")


def raw_socket(address: str, timeout: float = 5.0) -> socket.socket:
    host, port = parse_address(address)
    return socket.create_connection((host, port), timeout=timeout)


def request_frame(api_key: int, correlation_id: int, body: bytes, api_version: int = 0,
                  client_id: str | None = "raw") -> bytes:
    """A frame with a well-formed request header and ``body`` as given."""
    payload = (struct.pack(">hhi", api_key, api_version, correlation_id)
               + api.enc_string(client_id) + body)
    return _SIZE.pack(len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes:
    """The payload of the next response frame (fails the test on EOF)."""
    head = _recv_exactly(sock, 4)
    (size,) = _SIZE.unpack(head)
    return _recv_exactly(sock, size)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            pytest.fail(f"the broker closed the connection ({len(buf)} of {n} bytes read)")
        buf += chunk
    return bytes(buf)


def closed_by_peer(sock: socket.socket, timeout: float = 3.0) -> bool:
    """True if the broker closes ``sock`` within ``timeout`` (bytes it sends
    first are skipped); False if the connection is still open then."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def unused_port() -> int:
    """A local port nobody listens on now, below the ephemeral range so that
    no outgoing connection takes it before a server binds it."""
    return free_ports(1)[0]


# ------------------------------------------------------------------ metrics, logs, programs

def rss_mb(pid: int) -> float:
    """The resident size of process ``pid``, in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def scrape_metrics(port: int) -> dict[tuple[str, frozenset], float]:
    """/metrics as {(sample name, frozenset of label items): value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def get_json(url: str) -> tuple[int, dict]:
    """GET ``url``: (HTTP status, the JSON body), for errors too."""
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def metric(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def log_text(path: str, start: int = 0) -> str:
    """A broker's log file from byte ``start`` on (restarts append to it)."""
    with open(path, "rb") as f:
        f.seek(start)
        return f.read().decode(errors="replace")


def run_module(module: str, *args: str, stdin: bytes | None = None,
               timeout: float = 60.0) -> subprocess.CompletedProcess:
    """``python -m module args...``, output captured (bytes)."""
    return subprocess.run([sys.executable, "-m", module, *args], input=stdin,
                          capture_output=True, timeout=timeout, check=False)


def topic_values(lab, cluster: str, topic: str, brokers) -> list[bytes]:
    """Every value of ``topic`` on these brokers (indexes) of ``cluster``,
    read from each partition of each broker directly (``lab``: anything with
    ``broker_address(cluster, index)``: the lab, the containerized pipeline);
    a replicated topic's partitions are read from their leaders among them."""
    from broker.client.admin import AdminClient
    values: list[bytes] = []
    for i in brokers:
        address = lab.broker_address(cluster, i)
        with AdminClient(address) as admin:
            partitions = admin.partition_count(topic) or 0
        conn = connect(address)
        try:
            for p in range(partitions):
                if fetch(conn, topic, p, 0, 1).error == ErrorCode.NOT_LEADER_FOR_PARTITION:
                    continue      # a replica of a replicated topic: read at its leader
                values += [m.value for m in read_partition(conn, topic, p)]
        finally:
            conn.close()
    return values

