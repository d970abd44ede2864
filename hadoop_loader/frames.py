"""Avro container files framed from raw record bodies, without decoding.

A message value is ``magic, schema id, Avro binary`` (schemas/wire.py): the
Avro binary of a record is exactly what an Avro object container file
holds in its blocks. So the loader does not decode records in Python: it
groups the bodies by writer schema id and frames them into container files
(the specification's layout: ``Obj\\x01``, a metadata map with the writer
schema and the codec, a 16-byte sync marker, then blocks of ``count,
byte size, bodies, sync marker``), which Spark's JVM Avro reader decodes
and resolves to the reader schema. Framing costs a few memory copies per
record.

A value that is not an envelope (too short, wrong magic byte) is returned
apart for the error output; a body that is not valid Avro of its schema is
not detected here: the JVM reader fails on its file, and with it the load,
which then commits nothing (no step looks for the bad record).
"""
from __future__ import annotations

import io
import os
import zlib
from typing import BinaryIO, Iterable

from schemas.header import encode_long as _long

MAGIC = b"Obj\x01"
ENVELOPE = 5


def _bytes(data: bytes) -> bytes:
    return _long(len(data)) + data


def header(schema_json: str, codec: str = "null", sync: bytes | None = None,
           metadata: dict[str, bytes] | None = None) -> tuple[bytes, bytes]:
    """(file header, sync marker) of a container file."""
    if codec not in ("null", "deflate"):
        raise ValueError(f"codec {codec!r}: null or deflate")
    sync = sync or os.urandom(16)
    meta = {"avro.schema": schema_json.encode(), "avro.codec": codec.encode()}
    for k, v in (metadata or {}).items():
        meta[k] = v if isinstance(v, bytes) else str(v).encode()
    out = io.BytesIO()
    out.write(MAGIC)
    out.write(_long(len(meta)))
    for k, v in meta.items():
        out.write(_bytes(k.encode()))
        out.write(_bytes(v))
    out.write(_long(0))
    out.write(sync)
    return out.getvalue(), sync


def block(bodies: list[bytes], sync: bytes, codec: str = "null") -> bytes:
    data = b"".join(bodies)
    if codec == "deflate":
        c = zlib.compressobj(6, zlib.DEFLATED, -15)     # raw deflate, as Avro specifies
        data = c.compress(data) + c.flush()
    return _long(len(bodies)) + _long(len(data)) + data + sync


def write_container(out: BinaryIO, schema_json: str, bodies: Iterable[bytes], *,
                    codec: str = "null", block_records: int = 10_000,
                    metadata: dict[str, bytes] | None = None) -> int:
    """Write a container file of ``bodies`` (Avro binary records of
    ``schema_json``) to ``out``; the number of records."""
    head, sync = header(schema_json, codec, metadata=metadata)
    out.write(head)
    count = 0
    pending: list[bytes] = []
    for body in bodies:
        pending.append(body)
        if len(pending) >= block_records:
            out.write(block(pending, sync, codec))
            count += len(pending)
            pending = []
    if pending:
        out.write(block(pending, sync, codec))
        count += len(pending)
    return count


def split_envelopes(values: Iterable[bytes]) -> tuple[dict[int, list[bytes]], list[tuple[int, str]]]:
    """Bodies grouped by writer schema id; and (index, reason) of the values
    that are not envelopes."""
    by_schema: dict[int, list[bytes]] = {}
    bad: list[tuple[int, str]] = []
    for i, value in enumerate(values):
        if len(value) < ENVELOPE:
            bad.append((i, f"a value of {len(value)} bytes has no envelope"))
            continue
        if value[0] != 0:
            bad.append((i, f"unknown envelope magic byte {value[0]}"))
            continue
        sid = int.from_bytes(value[1:5], "big")
        group = by_schema.get(sid)
        if group is None:
            group = by_schema[sid] = []
        group.append(value[5:])
    return by_schema, bad
