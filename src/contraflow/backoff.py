"""Waiting between attempts: capped exponential backoff, one implementation for every retry loop.

A sink retrying a failed batch, the runtime reconnecting a connector and an
SPU client reconnecting to its server all wait longer after each failure, up
to a cap. This module depends on nothing else in contraflow, so the lowest
layer (the SPU client) can use it too.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from itertools import islice


def backoff(first_s: float, cap_s: float, growth: float = 2.0, *, jitter: bool = False) -> Iterator[float]:
    """Endless waits in seconds: `first_s`, then `growth` times the previous one, never above `cap_s`.

    With `jitter` each wait is drawn from its upper half, so many clients that
    lost the same server do not come back in step.
    """
    delay = first_s
    while True:
        wait = min(cap_s, delay)
        yield wait * random.uniform(0.5, 1.0) if jitter else wait
        delay = wait * growth


def first_waits(count: int, first_s: float, cap_s: float, *, jitter: bool = False) -> list[float]:
    """The first `count` waits of a doubling `backoff`."""
    return list(islice(backoff(first_s, cap_s, jitter=jitter), count))
