"""Page views for the loader's tests: v1 and v2 alternately."""
from __future__ import annotations

import uuid

from schemas.wire import ValueWriter

HOUR = 3_600_000
BASE = 1_800_000_000_000 - 1_800_000_000_000 % HOUR


def page_view_value(registry, i: int, t: int) -> bytes:
    """Page view ``i`` at event time ``t``: version 2 (with a session id) for
    odd ``i``, version 1 for even."""
    rec = {"header": {"time_ms": t, "host": "h", "service": "s", "event_id": uuid.uuid4().bytes},
           "member_id": i, "page_key": "feed", "url": f"/u/{i}", "referrer": None,
           "user_agent": "ua", "duration_ms": i}
    version = 2 if i % 2 else 1
    if version == 2:
        rec["session_id"] = f"s{i}"
    return ValueWriter(registry, "page_views", version=version).encode(rec)
