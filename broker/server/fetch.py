"""The fetch path: answers Fetch requests, long-polling until data is visible.

A fetch is answered at once when its entries hold ``min_bytes`` of visible
data (visible = below the log's flushed end: a consumer never sees bytes that
are not on disk; for a replicated partition also below its high watermark,
and only where this broker leads it: else NOT_LEADER_FOR_PARTITION), when
one entry has an error, when ``max_wait_ms`` is 0 or
the broker is stopping. Otherwise it is *parked*: it waits until a flush of
one of its logs makes enough visible (``wake``), its ``max_wait_ms`` (capped
by ``max_fetch_wait_ms``) runs out, its topic is deleted, the broker stops
(``answer_all``), or its connection closes (``drop_connection``: dropped
unanswered). A fetch reply's message bytes are file regions of the segments
(pinned here, sent with sendfile by the connection, unpinned once sent).

What this module owns: the parked fetches, indexed by log (``_parked``:
log -> the fetches waiting on it) and by connection (``conn.parked_fetches``,
a set on the Connection that only this module writes). Invariants:
  * a parked fetch is in ``_parked[lg]`` for each of its ``logs``, in its
    connection's ``parked_fetches``, and has a timer; ``unpark`` takes it out
    of all three at once and marks it ``done``; a done fetch is never
    answered (again): ``complete`` returns at once for it;
  * every parked fetch holds one not-ready Reply in its connection's outbox,
    so replies still leave in request order.

Thread: the broker's event-loop thread only (handlers, flush completions and
timers all run there); no locks.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass, field
from typing import Iterable

from broker.config import BrokerConfig
from broker.protocol import api
from broker.protocol.api import quote_name
from broker.protocol.errors import ErrorCode
from broker.storage.errors import CorruptRangeError, OffsetOutOfRangeError
from broker.storage.log import Log
from broker.storage.log_manager import LogManager

from .connection import Connection, FileRegion, Reply
from .metrics import BrokerMetrics

log = logging.getLogger(__name__)

_ENTRY_COUNT = struct.Struct(">i")     # a fetch response's number of results


@dataclass(slots=True, eq=False)
class FetchWait:
    """One fetch being answered: parked (long-poll) until min_bytes are visible."""

    conn: Connection
    reply: Reply
    correlation_id: int
    request: api.FetchRequest
    logs: list[Log] = field(default_factory=list)    # the logs it is parked on
    timer: asyncio.TimerHandle | None = None
    done: bool = False


class FetchLongPoll:
    def __init__(self, config: BrokerConfig, logs: LogManager, metrics: BrokerMetrics,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.logs = logs
        self.metrics = metrics
        self._loop = loop
        self.stopping = False         # set by the server: answer fetches at once
        self._parked: dict[Log, set[FetchWait]] = {}
        self.replication = None       # ReplicaManager, when the broker replicates

    def set_replication(self, replication) -> None:
        """Refuse fetches of replicated logs this broker does not lead."""
        self.replication = replication

    def handle(self, conn: Connection, header, req: api.FetchRequest) -> None:
        """A Fetch request: answer it now, or park it (see the module docstring)."""
        reply = Reply()
        conn.add_reply(reply)
        fw = FetchWait(conn, reply, header.correlation_id, req)
        max_wait = min(req.max_wait_ms, self.config.max_fetch_wait_ms)
        if self.complete(fw, final=max_wait == 0 or self.stopping):
            return
        for entry in req.entries:
            topic = self.logs.get(entry.topic)
            lg = topic.logs[entry.partition]
            fw.logs.append(lg)
            self._parked.setdefault(lg, set()).add(fw)
        conn.parked_fetches.add(fw)
        fw.timer = self._loop.call_later(max_wait / 1000, self.complete, fw, True)

    # ------------------------------------------------------------ wake-ups

    def wake(self, lg: Log) -> None:
        """A flush of ``lg`` completed: answer the fetches parked on it that
        now have enough to read."""
        fetches = self._parked.get(lg)
        if fetches:
            for fw in list(fetches):
                self.complete(fw, final=False)

    def answer_all(self) -> None:
        """Answer every parked fetch now with what it has (the broker stops)."""
        for fetches in list(self._parked.values()):
            for fw in list(fetches):
                self.complete(fw, final=True)

    def take_parked(self, logs: Iterable[Log]) -> list[FetchWait]:
        """Forget the fetches parked on ``logs`` (their topic is being
        deleted) and return them, to be answered by ``answer`` once it is."""
        taken: list[FetchWait] = []
        for lg in logs:
            taken.extend(self._parked.pop(lg, ()))
        return taken

    def answer(self, fetches: Iterable[FetchWait]) -> None:
        """Answer ``fetches`` now with what they have."""
        for fw in fetches:
            self.complete(fw, final=True)

    def drop_connection(self, conn: Connection) -> None:
        """``conn`` closed: unpark its fetches without answering them."""
        for fw in list(conn.parked_fetches):
            self.unpark(fw)

    def unpark(self, fw: FetchWait) -> None:
        """Take ``fw`` out of every index, cancel its timer, mark it done."""
        fw.done = True
        fw.conn.parked_fetches.discard(fw)
        if fw.timer is not None:
            fw.timer.cancel()
        for lg in fw.logs:
            waiting = self._parked.get(lg)
            if waiting is not None:
                waiting.discard(fw)

    # ------------------------------------------------------------ answering

    def complete(self, fw: FetchWait, final: bool) -> bool:
        """Answer the fetch if it has min_bytes (or an error, or ``final``).
        True when it is answered (now or before)."""
        if fw.done:
            return True
        plan = []
        total = 0
        has_error = False
        for entry in fw.request.entries:
            try:
                row = self._plan_entry(entry)
            except Exception as exc:     # a bug: this entry fails, the others go on
                log.exception("error planning a fetch of %s/%s", quote_name(entry.topic),
                              entry.partition)
                row = (entry, ErrorCode.UNKNOWN, f"internal error: {exc}", -1, -1, None, 0, 0)
            plan.append(row)
            if row[1]:
                has_error = True
            else:
                total += row[7]
        if not (final or has_error or total >= max(fw.request.min_bytes, 1)
                or fw.request.min_bytes == 0):
            return False
        self.unpark(fw)
        parts: list = [_ENTRY_COUNT.pack(len(plan))]
        size = 4
        has_regions = False
        metrics = self.metrics
        for entry, error, message, earliest, hw, seg, position, length in plan:
            head = api.encode_fetch_result_header(entry.topic, entry.partition, error, message,
                                                  earliest, hw, length)
            parts.append(head)
            size += len(head) + length
            if type(seg) is bytes:         # an error's payload (a quarantined range)
                parts.append(seg)
            elif length:
                seg.pin()
                parts.append(FileRegion(seg, position, length))
                has_regions = True
                metrics.bytes_out[entry.topic] += length
            if error:
                metrics.errors[("fetch", ErrorCode(error).name)] += 1
        parts.insert(0, api.encode_response_header(fw.correlation_id, size))
        if has_regions:
            fw.reply.set(parts, has_regions=True)
        else:
            fw.reply.set([b"".join(parts)])
        fw.conn.pump()
        return True

    def _plan_entry(self, entry) -> tuple:
        """What to send for one fetch entry: (entry, error, message, earliest,
        high watermark, segment or error payload, position, length)."""
        topic = self.logs.get(entry.topic)
        if topic is None or not 0 <= entry.partition < len(topic.logs):
            return (entry, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"unknown topic or partition {quote_name(entry.topic)}/{entry.partition}",
                    -1, -1, None, 0, 0)
        lg = topic.logs[entry.partition]
        if topic.replicated and self.replication is not None:
            refusal = self.replication.read_refusal(lg)
            if refusal is not None:
                return (entry, refusal[0], refusal[1], -1, -1, None, 0, 0)
        try:
            seg, position, length = lg.locate(entry.offset, entry.max_bytes)
        except OffsetOutOfRangeError as exc:
            return (entry, ErrorCode.OFFSET_OUT_OF_RANGE, str(exc), exc.earliest, exc.latest,
                    None, 0, 0)
        except CorruptRangeError as exc:
            # bit rot or lost bytes found by recovery: tell where to go on
            payload = api.encode_corrupt_range(exc.start, exc.end)
            return (entry, ErrorCode.CORRUPT_MESSAGE, str(exc), lg.earliest_offset,
                    lg.visible_end, payload, 0, len(payload))
        if length and not lg.check_message_at(entry.offset, self.config.max_message_bytes):
            # The broker has no index, but it can tell that no valid message
            # starts here: the client would otherwise parse garbage lengths.
            end = lg.corrupt_message_end(entry.offset, self.config.max_message_bytes)
            if end is not None:
                # a damaged message at a real boundary (bit rot since start-up)
                payload = api.encode_corrupt_range(entry.offset, end)
                return (entry, ErrorCode.CORRUPT_MESSAGE,
                        f"the message at offset {entry.offset} is corrupt; the next one "
                        f"starts at {end}", lg.earliest_offset, lg.visible_end, payload, 0,
                        len(payload))
            return (entry, ErrorCode.INVALID_OFFSET,
                    f"offset {entry.offset} is not the start of a valid message",
                    lg.earliest_offset, lg.visible_end, None, 0, 0)
        return (entry, ErrorCode.NONE, "", lg.earliest_offset, lg.visible_end, seg, position,
                length)
