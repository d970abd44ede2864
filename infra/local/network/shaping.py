"""What a WAN link does to the packets that cross it, as pure arithmetic.

The kernel here has no ``netem``: the lab's router delays packets itself
(infra/local/network/delayer.py). This module is its sans-IO core: given a
link's shape and the time a packet arrives, when the packet leaves, or that
it is dropped. No sockets, no clock of its own (the caller passes ``now``,
in seconds), randomness from a ``random.Random`` the caller seeds.

A link is one direction between two datacenters (``a -> b``); the lab keeps
one ``LinkShaper`` per direction, so each way can be cut, or lossy, alone.

For each packet, in order:

1. **cut**: dropped (counted as ``cut``);
2. **loss**: dropped with probability ``loss`` (``lost``), uniformly and
   independently per packet, as iptables' ``statistic`` match would; a
   TSO super-packet of k segments (the router takes them whole: delayer.py)
   is dropped whole with the probability that any of its k would be, so a
   link loses as many *events* as one of MTU-sized packets would, each a
   burst of k (TCP halves its window once per event either way);
3. **rate** (when ``rate_mbit`` > 0): the link sends one packet at a time;
   a packet starts once the previous one has left, and takes
   ``size * 8 / rate`` seconds. Packets waiting to be sent form a queue of
   at most ``queue_bytes``; one that would overflow it is dropped
   (``overflowed``), as a router's tail drop;
4. **delay**: the packet leaves ``rtt_ms / 2`` after it was sent, plus a
   jitter drawn uniformly from ``[-jitter_ms, +jitter_ms]`` (never below 0).

Invariants:
  * departures on one link never go backwards: a packet never leaves before
    the one that arrived before it (jitter spreads the delays, it does not
    reorder a link, as a FIFO queue on a real path does not);
  * a departure is never before its arrival;
  * with ``rate_mbit`` > 0, the bytes sent in any interval never exceed the
    rate times the interval plus one packet.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

#: a router's buffer for a rate-limited link unless the shape says otherwise
DEFAULT_QUEUE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class LinkShape:
    """One direction of a link between two datacenters."""
    rtt_ms: float = 0.0
    """Round-trip time the link adds (half of it each way)."""
    jitter_ms: float = 0.0
    """Each packet's one-way delay varies by up to this much either way."""
    loss: float = 0.0
    """Fraction of packets dropped at random (0.001: 0.1 %)."""
    rate_mbit: float = 0.0
    """Bandwidth in megabits per second (0: as fast as the router copies)."""
    queue_bytes: int = DEFAULT_QUEUE_BYTES
    """Bytes that may wait for a rate-limited link before it drops."""
    cut: bool = False
    """Every packet dropped (the link is down)."""

    def __post_init__(self) -> None:
        if not 0 <= self.rtt_ms <= 60_000:
            raise ValueError(f"rtt_ms must be 0..60000, not {self.rtt_ms}")
        if not 0 <= self.jitter_ms <= 60_000:
            raise ValueError(f"jitter_ms must be 0..60000, not {self.jitter_ms}")
        if not 0 <= self.loss <= 1:
            raise ValueError(f"loss must be a fraction 0..1, not {self.loss}")
        if self.rate_mbit < 0:
            raise ValueError(f"rate_mbit must be >= 0 (0: unlimited), not {self.rate_mbit}")
        if self.queue_bytes < 1500:
            raise ValueError(f"queue_bytes must be at least one packet (1500), not "
                             f"{self.queue_bytes}")

    def with_changes(self, **changes) -> "LinkShape":
        return replace(self, **changes)

    def describe(self) -> str:
        if self.cut:
            return "cut"
        parts = [f"rtt {self.rtt_ms:g} ms"]
        if self.jitter_ms:
            parts.append(f"jitter ±{self.jitter_ms:g} ms")
        if self.loss:
            parts.append(f"loss {self.loss * 100:g} %")
        parts.append(f"rate {self.rate_mbit:g} Mbit/s" if self.rate_mbit else "rate unlimited")
        return ", ".join(parts)


@dataclass
class LinkCounters:
    packets: int = 0          # arrived at the link
    bytes: int = 0
    sent: int = 0             # scheduled to leave
    cut: int = 0
    lost: int = 0
    overflowed: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class LinkShaper:
    """The schedule of one direction of a link."""
    shape: LinkShape
    rng: random.Random = field(default_factory=random.Random)
    counters: LinkCounters = field(default_factory=LinkCounters)
    _free_at: float = 0.0         # when the link finishes sending what it was given
    _last_departure: float = 0.0

    def reshape(self, shape: LinkShape) -> None:
        """A new shape from now on; packets already scheduled keep theirs."""
        self.shape = shape

    def schedule(self, size: int, now: float, segments: int = 1) -> float | None:
        """When a packet of ``size`` bytes arriving at ``now`` leaves the
        link, or None if the link drops it. A packet that stands for
        ``segments`` wire packets (a TSO super-packet) is lost when any of
        them would be: with probability 1 - (1 - loss) ** segments."""
        shape = self.shape
        self.counters.packets += 1
        self.counters.bytes += size
        if shape.cut:
            self.counters.cut += 1
            return None
        if shape.loss and self.rng.random() < (
                shape.loss if segments == 1 else 1 - (1 - shape.loss) ** segments):
            self.counters.lost += 1
            return None
        sent = now
        if shape.rate_mbit > 0:
            start = max(now, self._free_at)
            bytes_per_s = shape.rate_mbit * 1e6 / 8
            if (start - now) * bytes_per_s + size > shape.queue_bytes:
                self.counters.overflowed += 1
                return None
            self._free_at = sent = start + size / bytes_per_s
        delay = shape.rtt_ms / 2000
        if shape.jitter_ms:
            delay = max(0.0, delay + self.rng.uniform(-shape.jitter_ms, shape.jitter_ms) / 1000)
        departure = max(sent + delay, self._last_departure)
        self._last_departure = departure
        self.counters.sent += 1
        return departure
