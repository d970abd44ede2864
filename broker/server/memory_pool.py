"""A broker-wide budget for request bytes being read (Kafka's
``queued.max.request.bytes``).

A connection that has read a frame's size field reserves the whole frame
before it reads the rest; while the pool cannot grant it, the connection stops
reading (its bytes wait in the kernel's socket buffer, which the peer's TCP
window bounds). A reservation is all or nothing, taken when the size is known,
so a connection that holds one can always finish its frame: many half-sent
frames cannot deadlock the pool. A frame larger than the whole pool is granted
when nothing else is reserved.

Used on the broker's event-loop thread only; never does I/O itself.
"""
from __future__ import annotations

from collections import deque
from typing import Callable


class RequestMemoryPool:
    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self.used = 0
        self.denied = 0                  # reservations refused (a reader had to wait)
        self._waiting: deque[Callable[[], bool]] = deque()

    def try_reserve(self, size: int) -> bool:
        if self.used + size <= self.capacity or self.used == 0:
            self.used += size
            return True
        self.denied += 1
        return False

    def wait(self, retry: Callable[[], bool]) -> None:
        """Call ``retry`` (in order of arrival) when memory is released, until
        it returns True (it reserved what it needed, or gave up)."""
        self._waiting.append(retry)

    def release(self, size: int) -> None:
        self.used -= size
        if self.used < 0:
            raise AssertionError(f"released more than reserved ({self.used})")
        while self._waiting and self.used < self.capacity:
            if not self._waiting[0]():
                break
            self._waiting.popleft()
