"""The wire format of every message value: an envelope around Avro binary.

    value := magic:uint8 (= 0) schema_id:uint32 (big-endian) avro:bytes

``avro`` is the record in Avro's binary encoding, written with schema
``schema_id`` (a registry id: see registry.py). A reader decodes it with
that writer's schema and resolves it to its own reader's schema (Avro's
schema resolution), so old readers read new data and new readers old data
as far as the subject's compatibility level promises.

``ValueWriter`` and ``ValueReader`` cache the parsed schemas they use; both
are cheap to keep for a process's lifetime.
"""
from __future__ import annotations

import io
import struct
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from schemas.registry import SchemaNotFoundError, SchemaRegistry, expand

MAGIC = 0
ENVELOPE = struct.Struct(">BI")
ENVELOPE_BYTES = ENVELOPE.size


class EnvelopeError(ValueError):
    """A value that is not a readable envelope. ``reason`` is one of
    ``short``, ``magic``, ``unknown-schema``, ``undecodable``."""

    def __init__(self, reason: str, message: str, schema_id: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.schema_id = schema_id


def pack_envelope(schema_id: int, avro: bytes) -> bytes:
    return ENVELOPE.pack(MAGIC, schema_id) + avro


def schema_id_of(value: bytes | memoryview) -> int:
    """The writer's schema id of an envelope (EnvelopeError if it is not one)."""
    if len(value) < ENVELOPE_BYTES:
        raise EnvelopeError("short", f"a value of {len(value)} bytes has no envelope "
                                     f"({ENVELOPE_BYTES} bytes)")
    magic, sid = ENVELOPE.unpack_from(value, 0)
    if magic != MAGIC:
        raise EnvelopeError("magic", f"unknown envelope magic byte {magic} (expected {MAGIC})")
    return sid


class ValueWriter:
    """Encodes records of one subject's schema into envelopes.

    ``ValueWriter(registry, subject)`` writes with the subject's latest
    version; ``version=n`` or ``schema=...`` (which must be registered
    under the subject) pins another."""

    def __init__(self, registry: SchemaRegistry, subject: str, *, version: int | str = "latest",
                 schema: Any = None) -> None:
        if schema is not None:
            found = registry.lookup(subject, schema)
            if found is None:
                raise SchemaNotFoundError(f"that schema is not registered under {subject!r}")
        else:
            found = registry.get(subject, version)
        self.subject = subject
        self.version = found.version
        self.schema_id = found.id
        self._parsed = registry.parsed(found.id)
        self._prefix = ENVELOPE.pack(MAGIC, found.id)

    def encode(self, record: dict) -> bytes:
        out = io.BytesIO()
        out.write(self._prefix)
        schemaless_writer(out, self._parsed, record)
        return out.getvalue()


class ValueReader:
    """Decodes envelopes: with each value's own writer schema, resolved to a
    reader schema when one is given (``reader_schema``, or the latest version
    of ``subject``); without one, records come out as they were written."""

    def __init__(self, registry: SchemaRegistry, *, subject: str | None = None,
                 reader_schema: Any = None) -> None:
        self.registry = registry
        if reader_schema is None and subject is not None:
            reader_schema = registry.get(subject).schema
        self._reader = parse_schema(expand(reader_schema)) if reader_schema is not None else None
        self._writers: dict[int, Any] = {}

    def writer_schema(self, sid: int) -> Any:
        parsed = self._writers.get(sid)
        if parsed is None:
            try:
                parsed = self.registry.parsed(sid)
            except SchemaNotFoundError:
                raise EnvelopeError("unknown-schema", f"unknown schema id {sid}", sid) from None
            self._writers[sid] = parsed
        return parsed

    def decode(self, value: bytes | memoryview) -> dict:
        sid = schema_id_of(value)
        writer = self.writer_schema(sid)
        data = io.BytesIO(value)
        data.seek(ENVELOPE_BYTES)
        try:
            record = schemaless_reader(data, writer, self._reader)
        except Exception as exc:   # truncated or garbled Avro, or a resolution failure
            raise EnvelopeError("undecodable", f"cannot decode a value written with schema "
                                               f"{sid}: {type(exc).__name__}: {exc}", sid) \
                from None
        if data.tell() != len(value):
            raise EnvelopeError("undecodable", f"{len(value) - data.tell()} bytes left over "
                                               f"after a record of schema {sid}", sid)
        return record
