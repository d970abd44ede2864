"""The flusher thread: fsyncs segment files off the event loop (group commit).

States of one log's flush: idle -> in progress (segments pinned, handed to
this thread) -> done (reported back on the loop thread, which advances the
log's flushed end and wakes consumers and "flushed" acks). While a flush is
in progress, appends go on; whatever arrives meanwhile is covered by the next
flush. Of the logs, this thread touches nothing but ``Segment.sync`` of
pinned segments; it hands each batch of results to ``report``.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

# (log, segments, target offset, ok, seconds, error)
FlushResult = tuple[object, list, int, bool, float, "OSError | None"]


class Flusher:
    def __init__(self, report: Callable[[list[FlushResult]], None]) -> None:
        """``report`` is called on this thread with a batch of results; it must
        hand them to the loop thread (e.g. loop.call_soon_threadsafe)."""
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._report = report
        self._thread = threading.Thread(target=self._run, name="samsa-flusher", daemon=True)
        self._thread.start()

    def submit(self, lg, segments: list, target: int) -> None:
        self._queue.put((lg, segments, target))

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            while True:      # take everything queued: one report per batch
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = None in items
            results: list[FlushResult] = []
            for item in items:
                if item is None:
                    continue
                lg, segments, target = item
                start = time.monotonic()
                error = None
                try:
                    for seg in segments:
                        seg.sync()
                except Exception as exc:    # noqa: BLE001 - this thread must never die
                    error = exc if isinstance(exc, OSError) else OSError(str(exc))
                    log.error("flush of %s failed: %s", getattr(lg, "name", lg), exc)
                results.append((lg, segments, target, error is None,
                                time.monotonic() - start, error))
            if results:
                try:
                    self._report(results)
                except RuntimeError:     # the loop is closed: shutting down
                    pass
            if stop:
                return
