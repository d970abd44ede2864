"""Giving freed memory back to the system after a burst (glibc's
``malloc_trim``). The thread that checks compressed message sets off the
event loop (produce.py) inflates each wrapper into memory from its own
malloc arena; glibc keeps what an arena freed for that thread's next use,
so after a flood of compressed bombs a broker stayed at about 300 MB
resident where it had used 28 MB, and never went down. ``malloc_trim(0)``
returns every arena's free pages. Where the C library has no malloc_trim
(not glibc), ``release()`` does nothing.

Made once per broker, it also fixes glibc's mmap threshold at 4 MiB
(``mallopt``): a block that large is mapped on its own and unmapped when
freed, where glibc would otherwise raise the threshold to the largest block
freed so far (up to 32 MiB) and serve the next ones from an arena that keeps
them. Together (tests/server/test_memory_after_flood.py, 100,000 malformed
frames with 30 gzip bombs): 30 MB before, 49 MB after, where it stayed at
87 MB; with the bombs back to back, 46 MB where it stayed at 180 MB."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging

log = logging.getLogger(__name__)
M_MMAP_THRESHOLD = -3            # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = 4 << 20


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    """The C library, found once per process (find_library runs ldconfig)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


class MemoryTrimmer:
    """``release()``: malloc_trim(0), if the C library has it; counts the
    calls that ran (``trims``)."""

    def __init__(self) -> None:
        self.trims = 0
        self._trim = None
        try:
            libc = _libc()
            self._trim = libc.malloc_trim
            self._trim.argtypes = [ctypes.c_size_t]
            self._trim.restype = ctypes.c_int
            # large blocks (the validation's inflated buffers) mapped on
            # their own and unmapped when freed: without a fixed threshold
            # glibc raises it to the largest block freed (up to 32 MiB), and
            # later ones come from the arena, which keeps them
            libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        except (OSError, AttributeError):
            log.info("no malloc_trim in this C library: freed memory stays with the process")

    @property
    def available(self) -> bool:
        return self._trim is not None

    def release(self) -> None:
        if self._trim is not None:
            self._trim(0)
            self.trims += 1
