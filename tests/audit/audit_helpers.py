"""Events for the audit tests: real envelopes of the shipped page-view
schema, with ids the tests know."""
from __future__ import annotations

import uuid

from schemas import catalog
from schemas.registry import SchemaRegistry
from schemas.stores import FileStore
from schemas.wire import ValueReader, ValueWriter

from audit.counting import AUDIT_TOPIC
from audit.tally import id_hash

WINDOW = 600_000


def file_registry(path) -> SchemaRegistry:
    registry = SchemaRegistry(FileStore(str(path)))
    registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
    registry.register(AUDIT_TOPIC, catalog.load(catalog.MONITORING_EVENT))
    return registry


def page_views(writer: ValueWriter, times_ms: list[int]) -> tuple[list[bytes], list[bytes]]:
    """(values, event ids) of one page view per event time."""
    values, ids = [], []
    for i, t in enumerate(times_ms):
        eid = uuid.uuid4().bytes
        ids.append(eid)
        values.append(writer.encode({
            "header": {"time_ms": t, "host": "web-1", "service": "frontend", "event_id": eid},
            "member_id": i, "page_key": "feed", "url": f"/feed?p={i}", "referrer": None,
            "user_agent": "test", "duration_ms": 5}))
    return values, ids


def checksum(ids) -> int:
    return sum(id_hash(i) for i in ids) % (1 << 64)


def decode_events(registry: SchemaRegistry, values) -> list[dict]:
    reader = ValueReader(registry, subject=AUDIT_TOPIC)
    return [reader.decode(v) for v in values]
