"""Read an event's header straight from its envelope, without Avro.

Every event schema starts with the common header (``samsa.events.EventHeader``:
``time_ms`` long, ``host`` string, ``service`` string, ``event_id``
fixed(16)), so its bytes come first in the Avro binary encoding: a zig-zag
varint, two length-prefixed strings, 16 bytes. ``event_header`` reads the
time and the id from there, which is all the audit's counters need, at a
fraction of the cost of decoding the record (no registry lookup: it relies
on the header being the first field, which ``check_header_first`` verifies
for a schema; the tests hold every shipped event schema to it, but
registration does not check it).
"""
from __future__ import annotations

from typing import Any

from schemas.wire import ENVELOPE_BYTES, MAGIC

HEADER_NAME = "samsa.events.EventHeader"
EVENT_ID_BYTES = 16


class HeaderError(ValueError):
    pass


def encode_long(n: int) -> bytes:
    """Avro's encoding of a long: zig-zag, then a little-endian base-128 varint."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise HeaderError("the value ends inside the header")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise HeaderError("a varint longer than 10 bytes")


def event_header(value: bytes | memoryview) -> tuple[int, bytes]:
    """(event time in ms, 16-byte event id) of an event's envelope;
    HeaderError when the value is not an envelope with a header."""
    end = len(value)
    if end < ENVELOPE_BYTES + 3 + EVENT_ID_BYTES or value[0] != MAGIC:
        raise HeaderError("not an envelope")
    pos = ENVELOPE_BYTES
    zz, pos = _varint(value, pos, end)
    time_ms = (zz >> 1) ^ -(zz & 1)
    for _ in range(2):                       # host, service
        zz, pos = _varint(value, pos, end)
        length = (zz >> 1) ^ -(zz & 1)
        if length < 0:
            raise HeaderError("a negative string length")
        pos += length
    if pos + EVENT_ID_BYTES > end:
        raise HeaderError("the value ends inside the header")
    return time_ms, bytes(value[pos:pos + EVENT_ID_BYTES])


def check_header_first(schema: Any) -> None:
    """HeaderError unless ``schema`` (self-contained) is a record whose first
    field is the common header."""
    if not isinstance(schema, dict) or schema.get("type") != "record" or not schema["fields"]:
        raise HeaderError("not a record")
    first = schema["fields"][0]
    t = first["type"]
    name = t.get("name") if isinstance(t, dict) else t
    if first["name"] != "header" or name != HEADER_NAME:
        raise HeaderError(f"its first field must be 'header' of type {HEADER_NAME}")
