"""Drop-behind: bound the page cache the broker's own writes fill.

Why. The paper leaves caching to the operating system, and so does Samsa by
default on ordinary machines. On a virtual machine whose kernel hands freed
memory back to the hypervisor (virtio-balloon *free page reporting*, as on
Firecracker and other balloon-enabled VMs), a growing page cache is not free:
each page the cache takes beyond the memory the host currently backs costs a
host page fault on first touch. Measured on the 2-core VM of bench/RESULTS.md:
appending 1 GiB files with fsync ran at ~2.2 GB/s into recycled pages and at
~0.4 GB/s once the cache grew into unbacked memory, and a broker that already
held a few GB produced at half the speed of a fresh one (the "sustained"
figures). Dropping flushed data behind a budget keeps the cache recycling the
same, already-backed pages.

What. ``PageCacheBudget`` keeps, oldest first, the byte ranges of segment
files that flushes made durable. After each flush it tells the kernel
(``posix_fadvise(POSIX_FADV_DONTNEED)``) to drop the oldest ranges until at
most ``budget_bytes`` of the broker's recently written data stay cached.
Consumers that keep up read from the cache; a consumer further behind than
the budget reads from disk (sequentially, with the kernel's read-ahead).

Invariants:
  * only fsync'ed (clean) ranges are ever recorded, so a drop never starts
    writeback and never changes what a read returns: it is advice about
    memory, not about data. The advice starts at the page holding a range's
    start (the kernel drops whole pages only; the bytes before the start in
    that page are older, hence durable too);
  * ranges are recorded in flush order; ``cached_bytes`` is their sum and is
    <= ``budget_bytes`` when ``flushed()`` returns;
  * a range of a segment that was deleted or closed meanwhile is discarded
    without a system call when it reaches the head (its pages went with the
    file; until then it is counted, so the budget errs towards dropping).

Thread-safety: used from the broker's event-loop thread only (the thread that
completes flushes and deletes segments), so a segment's descriptor cannot be
closed while it is advised.
"""
from __future__ import annotations

import glob
import logging
import os
from collections import deque
from typing import Callable

log = logging.getLogger(__name__)

DROP_BEHIND_MODES = ("auto", "on", "off")
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# virtio-balloon feature bit: the guest reports free pages to the host, which
# discards them (VIRTIO_BALLOON_F_REPORTING in the virtio specification, 1.2)
_BALLOON_F_REPORTING = 5
_SYSFS_VIRTIO = "/sys/bus/virtio/drivers/virtio_balloon"


def free_page_reporting(sysfs_dir: str = _SYSFS_VIRTIO) -> bool:
    """True when a virtio-balloon device negotiated free page reporting: freed
    guest memory goes back to the host, and memory the page cache grows into
    must be faulted in again by the host."""
    for path in glob.glob(os.path.join(sysfs_dir, "virtio*", "features")):
        try:
            with open(path) as f:
                bits = f.read().strip()
        except OSError:
            continue
        # one character per feature bit, bit 0 first
        if len(bits) > _BALLOON_F_REPORTING and bits[_BALLOON_F_REPORTING] == "1":
            return True
    return False


def drop_behind_enabled(mode: str, sysfs_dir: str = _SYSFS_VIRTIO) -> bool:
    if mode not in DROP_BEHIND_MODES:
        raise ValueError(f"drop_behind must be one of {', '.join(DROP_BEHIND_MODES)}, "
                         f"not {mode!r}")
    if mode == "auto":
        return free_page_reporting(sysfs_dir)
    return mode == "on"


def _fadvise_dontneed(fd: int, start: int, length: int) -> None:
    os.posix_fadvise(fd, start, length, os.POSIX_FADV_DONTNEED)


class PageCacheBudget:
    """The broker's recently flushed ranges, dropped from the page cache
    oldest first beyond ``budget_bytes``."""

    def __init__(self, budget_bytes: int,
                 advise: Callable[[int, int, int], None] = _fadvise_dontneed) -> None:
        if budget_bytes < 0:
            raise ValueError("budget_bytes must be >= 0")
        self.budget_bytes = budget_bytes
        self._advise = advise
        self._ranges: deque[list] = deque()     # [segment, start, end] file positions
        self.cached_bytes = 0
        self.dropped_bytes = 0                  # advised out since start (a metric)

    def flushed(self, ranges: list[tuple[object, int, int]]) -> None:
        """Record ranges (segment, start, end) just made durable; drop the
        oldest recorded bytes beyond the budget."""
        for seg, start, end in ranges:
            if end <= start:
                continue
            last = self._ranges[-1] if self._ranges else None
            if last is not None and last[0] is seg and last[2] == start:
                last[2] = end           # the same file, contiguous: one range
            else:
                self._ranges.append([seg, start, end])
            self.cached_bytes += end - start
        excess = self.cached_bytes - self.budget_bytes
        while excess > 0 and self._ranges:
            rng = self._ranges[0]
            seg, start, end = rng
            take = min(excess, end - start)
            if seg.fd >= 0 and not seg.deleted:
                # the kernel drops whole pages only: start at the page holding
                # ``start`` (what precedes it there is older, hence durable),
                # or the partial page at each range's head would never go
                aligned = start - start % _PAGE
                try:
                    self._advise(seg.fd, aligned, start + take - aligned)
                    self.dropped_bytes += take
                except OSError as exc:      # advice only: never fail a flush over it
                    log.debug("posix_fadvise on %s failed: %s", seg.path, exc)
            self.cached_bytes -= take
            excess -= take
            if take == end - start:
                self._ranges.popleft()
            else:
                rng[1] = start + take
