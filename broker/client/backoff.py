"""Exponential back-off with jitter: one formula for producer, consumer and mirror.

The delay after the n-th failure in a row is ``initial_ms * 2**(n-1)``, capped at
``max_ms``, then spread by ``jitter`` (0.2: uniformly within ±20 %), so clients
that failed together do not retry together. Pure: no sleeping here; callers
sleep (or wait on an event) for what ``next_delay_ms`` returns.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field


def backoff_delay_ms(failures_in_a_row: int, initial_ms: float, max_ms: float,
                     jitter: float = 0.2, rng: random.Random | None = None) -> float:
    """The delay before the next try after ``failures_in_a_row`` (>= 1) failures."""
    if failures_in_a_row < 1:
        return 0.0
    exponent = min(failures_in_a_row - 1, 62)
    delay = min(initial_ms * (2 ** exponent), max_ms)
    if jitter:
        spread = (rng or random).uniform(-jitter, jitter)
        delay = min(max_ms, delay * (1.0 + spread))
    return max(0.0, delay)


@dataclass
class Backoff:
    """Counts failures in a row; ``reset()`` after a success."""

    initial_ms: float
    max_ms: float
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)
    failures_in_a_row: int = 0

    def next_delay_ms(self) -> float:
        """Record one more failure and return how long to wait before retrying."""
        self.failures_in_a_row += 1
        return backoff_delay_ms(self.failures_in_a_row, self.initial_ms, self.max_ms,
                                self.jitter, self.rng)

    def reset(self) -> None:
        self.failures_in_a_row = 0
