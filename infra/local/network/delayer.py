"""The router's packet delayer: every packet between two datacenters passes
through the TUN device ``wan0``; this loop reads it, asks its link's
``LinkShaper`` (shaping.py) when it leaves or whether it is dropped, holds
it until then and writes it back to ``wan0``, where the kernel routes it on
to its datacenter.

One thread, one ``epoll`` over the TUN device, the control socket, its
connections and a wake-up pipe for signals; packets waiting to leave are in
a heap ordered by departure, timers (a control connection's deadline) in
another. A packet whose link adds nothing (no delay, rate or loss) is
written back at once, without the heap. Timing is as precise as
``epoll_wait``'s millisecond timeout (a packet leaves up to ~1 ms late).
Nothing watched may block: every packet waits while a handler runs, so a
handler does non-blocking I/O only (keeper.py's control connections).

A packet that is not IPv4, or whose source or destination is not in a
datacenter, is dropped and counted (``stray``): only routed traffic between
datacenters comes this way.
"""
from __future__ import annotations

import errno
import heapq
import itertools
import logging
import os
import random
import select
import time
from typing import Callable

from infra.local.network.fabric import VNET_HDR
from infra.local.network.plan import NetworkPlan
from infra.local.network.shaping import LinkShape, LinkShaper

log = logging.getLogger(__name__)

READ_BURST = 512          # packets read per wake-up before writing due ones
MAX_PACKET = 65536


def segments_of(packet: bytes) -> int:
    """The wire segments of a TSO super-packet read with its virtio_net_hdr
    (flags, gso_type, hdr_len, gso_size, ...: little-endian), IPv4 within."""
    gso_size = packet[4] | packet[5] << 8
    if not gso_size:
        return 1
    ip = VNET_HDR
    headers = (packet[ip] & 0x0F) * 4 + (packet[ip + (packet[ip] & 0x0F) * 4 + 12] >> 4) * 4
    payload = len(packet) - ip - headers
    return max(1, -(-payload // gso_size))


class Delayer:
    def __init__(self, plan: NetworkPlan, tun_fd: int, seed: int | None = None,
                 clock: Callable[[], float] = time.monotonic, offload: bool = True) -> None:
        self.plan = plan
        self.fd = tun_fd
        self.header = VNET_HDR if offload else 0     # bytes before the IP packet
        self.clock = clock
        rng = random.Random(seed)
        planned = {(a, b): shape for a, b, shape in plan.links}
        self.planned: dict[tuple[str, str], LinkShape] = {}
        self.shapers: dict[tuple[str, str], LinkShaper] = {}
        for a in plan.datacenters:
            for b in plan.datacenters:
                if a is not b:
                    shape = planned.get((a.name, b.name), LinkShape())
                    self.planned[(a.name, b.name)] = shape
                    self.shapers[(a.name, b.name)] = LinkShaper(
                        shape, random.Random(rng.getrandbits(64)))
        # a datacenter by the top 24 bits of an address (each is a /24)
        self._by_net24 = {int(dc.subnet.network_address).to_bytes(4, "big")[:3]: dc.name
                          for dc in plan.datacenters}
        self._heap: list[tuple[float, int, bytes]] = []
        self._seq = itertools.count()
        self.stray = 0
        self.write_errors = 0
        self.handlers: dict[int, Callable[[], None]] = {}
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._poller = select.epoll()                # closed when run() returns
        self._poller.register(tun_fd, select.EPOLLIN)
        self._stop = False

    # ------------------------------------------------------------ the links

    def link(self, a: str, b: str) -> LinkShaper:
        try:
            return self.shapers[(a, b)]
        except KeyError:
            names = ", ".join(dc.name for dc in self.plan.datacenters)
            raise KeyError(f"no link from {a!r} to {b!r} (datacenters: {names})") from None

    def queued(self) -> int:
        return len(self._heap)

    # ------------------------------------------------------------ packets

    def arrive(self, packet: bytes, now: float) -> float | None:
        """When ``packet`` leaves (``now`` for at once), or None: dropped.
        With offload, ``packet`` starts with a virtio_net_hdr and may be a
        TSO super-packet: its segments count for the loss (segments())."""
        ip = self.header
        if len(packet) < ip + 20 or packet[ip] >> 4 != 4:
            self.stray += 1
            return None
        src = self._by_net24.get(packet[ip + 12:ip + 15])
        dst = self._by_net24.get(packet[ip + 16:ip + 19])
        if src is None or dst is None or src == dst:
            self.stray += 1
            return None
        segments = segments_of(packet) if ip and packet[1] else 1
        return self.shapers[(src, dst)].schedule(len(packet) - ip, now, segments)

    def _read_packets(self) -> None:
        fd, now = self.fd, self.clock()
        for _ in range(READ_BURST):
            try:
                packet = os.read(fd, MAX_PACKET)
            except BlockingIOError:
                return
            departure = self.arrive(packet, now)
            if departure is None:
                continue
            if departure <= now:
                self._write(packet)
            else:
                heapq.heappush(self._heap, (departure, next(self._seq), packet))

    def _write(self, packet: bytes) -> None:
        try:
            os.write(self.fd, packet)
        except OSError as exc:
            # the kernel's backlog is full (ENOBUFS) or the packet is refused:
            # a drop, as a router's would be
            self.write_errors += 1
            if exc.errno not in (errno.ENOBUFS, errno.EAGAIN, errno.EINVAL):
                raise

    def _send_due(self) -> float | None:
        """Write every packet due; the seconds until the next one (None: none)."""
        heap, now = self._heap, self.clock()
        while heap:
            departure = heap[0][0]
            if departure > now:
                return departure - now
            self._write(heapq.heappop(heap)[2])
        return None

    # ------------------------------------------------------------ the loop

    def watch(self, fd: int, handler: Callable[[], None], writable: bool = False) -> None:
        """Call ``handler`` when ``fd`` is readable (or, with ``writable``,
        writable instead); again for an fd already watched changes what it
        waits for. Allowed before and during run(), from the loop's thread;
        the handler may be called with nothing to do (it must not block)."""
        events = select.EPOLLOUT if writable else select.EPOLLIN
        if fd in self.handlers:
            self._poller.modify(fd, events)
        else:
            self._poller.register(fd, events)
        self.handlers[fd] = handler

    def unwatch(self, fd: int) -> None:
        """Stop watching ``fd`` (before closing it)."""
        if self.handlers.pop(fd, None) is not None:
            self._poller.unregister(fd)

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` once at ``when`` (on the delayer's clock), from
        the loop. There is no cancelling: a callback whose purpose is gone
        does nothing."""
        heapq.heappush(self._timers, (when, next(self._seq), callback))

    def _run_timers(self) -> float | None:
        """Call every timer due; the seconds until the next one (None: none)."""
        timers = self._timers
        while timers:
            wait = timers[0][0] - self.clock()
            if wait > 0:
                return wait
            heapq.heappop(timers)[2]()
        return None

    def stop(self) -> None:
        self._stop = True

    def run(self) -> None:
        """The loop, until stop(); once."""
        poller = self._poller
        try:
            while not self._stop:
                waits = [w for w in (self._run_timers(), self._send_due()) if w is not None]
                timeout = max(0.001, min(waits)) if waits else -1
                for fd, _mask in poller.poll(timeout):
                    if fd == self.fd:
                        self._read_packets()
                    else:
                        # gone if an earlier handler of this round unwatched it
                        handler = self.handlers.get(fd)
                        if handler is not None:
                            handler()
        finally:
            poller.close()
