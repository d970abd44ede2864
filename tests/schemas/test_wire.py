"""Values on the wire: envelope, writer schema by id, resolution to the
reader's schema (a real evolution, both ways), the header read without Avro,
and every kind of bad value refused with its reason."""
from __future__ import annotations

import os
import struct
import uuid

import pytest

from schemas import catalog
from schemas.header import HeaderError, check_header_first, event_header
from schemas.wire import EnvelopeError, ValueReader, ValueWriter, pack_envelope, schema_id_of

V1 = catalog.load("samsa.events.PageViewEvent")
V2 = catalog.load("samsa.events.PageViewEvent.v2")


def page_view(**extra) -> dict:
    record = {"header": {"time_ms": 1_700_000_000_123, "host": "web-17", "service": "frontend",
                         "event_id": uuid.uuid4().bytes},
              "member_id": 42, "page_key": "profile-view", "url": "/in/someone",
              "referrer": None, "user_agent": "Mozilla/5.0", "duration_ms": 37}
    record.update(extra)
    return record


@pytest.fixture
def evolved(file_registry):
    v1 = file_registry.register("page_views", V1)
    v2 = file_registry.register("page_views", V2)
    return file_registry, v1, v2


def test_envelope_layout(evolved):
    registry, v1, _v2 = evolved
    value = ValueWriter(registry, "page_views", version=1).encode(page_view())
    assert value[0] == 0
    assert struct.unpack(">I", value[1:5])[0] == v1.id == schema_id_of(value)


def test_old_reader_reads_new_data(evolved):
    registry, _v1, _v2 = evolved
    new = page_view(session_id="s-9")
    value = ValueWriter(registry, "page_views").encode(new)          # latest: version 2
    old_reader = ValueReader(registry, reader_schema=V1)
    decoded = old_reader.decode(value)
    assert "session_id" not in decoded
    assert decoded == {k: v for k, v in new.items() if k != "session_id"}


def test_new_reader_reads_old_data_with_the_default(evolved):
    registry, _v1, _v2 = evolved
    old = page_view()
    value = ValueWriter(registry, "page_views", version=1).encode(old)
    decoded = ValueReader(registry, subject="page_views").decode(value)     # reads as v2
    assert decoded == {**old, "session_id": ""}


def test_without_a_reader_schema_records_come_out_as_written(evolved):
    registry, _v1, _v2 = evolved
    record = page_view(session_id="abc")
    assert ValueReader(registry).decode(ValueWriter(registry, "page_views").encode(record)) \
        == record


def test_the_header_is_read_without_avro(evolved):
    registry, _v1, _v2 = evolved
    record = page_view(session_id="x")
    for version in (1, 2):
        value = ValueWriter(registry, "page_views", version=version).encode(record)
        assert event_header(value) == (record["header"]["time_ms"],
                                       record["header"]["event_id"])
    negative = page_view()
    negative["header"]["time_ms"] = -5
    assert event_header(ValueWriter(registry, "page_views").encode(
        {**negative, "session_id": ""}))[0] == -5


def test_every_shipped_event_starts_with_the_header():
    for topic, name in catalog.TOPIC_SCHEMAS.items():
        check_header_first(catalog.load(name))
    with pytest.raises(HeaderError, match="first field must be 'header'"):
        check_header_first({"type": "record", "name": "X",
                            "fields": [{"name": "a", "type": "int"}]})


@pytest.mark.parametrize("value, reason", [
    (b"", "short"),
    (b"\x00\x00\x00", "short"),
    (b"\x07\x00\x00\x00\x01rest", "magic"),
    (pack_envelope(123456789, b"\x02"), "unknown-schema"),
])
def test_bad_envelopes(evolved, value, reason):
    registry, _v1, _v2 = evolved
    with pytest.raises(EnvelopeError) as err:
        ValueReader(registry).decode(value)
    assert err.value.reason == reason


def test_garbled_and_truncated_avro_is_undecodable(evolved):
    registry, _v1, _v2 = evolved
    value = ValueWriter(registry, "page_views").encode(page_view(session_id=""))
    reader = ValueReader(registry)
    for bad in (value[:20], value + b"\x00\x01", value[:5] + os.urandom(8)):
        with pytest.raises(EnvelopeError) as err:
            reader.decode(bad)
        assert err.value.reason == "undecodable", bad
        assert err.value.schema_id == schema_id_of(value)


def test_header_errors_on_bad_values():
    for bad in (b"", b"\x01" + bytes(40), b"\x00\x00\x00\x00\x01" + b"\xff" * 40):
        with pytest.raises(HeaderError):
            event_header(bad)


def test_a_writer_for_an_unregistered_schema_is_refused(evolved):
    registry, _v1, _v2 = evolved
    from schemas.registry import SchemaNotFoundError
    with pytest.raises(SchemaNotFoundError, match="not registered under 'page_views'"):
        ValueWriter(registry, "page_views", schema=catalog.load("samsa.events.SearchEvent"))


def test_the_smallest_header_is_read():
    """Empty host and service: three one-byte varints and the id (a value of
    24 bytes) is a header, not a malformed value."""
    value = b"\x00\x00\x00\x00\x01" + b"\x02\x00\x00" + bytes(range(16))
    assert len(value) == 24
    assert event_header(value) == (1, bytes(range(16)))
