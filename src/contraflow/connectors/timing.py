"""Waiting without spinning: sleeps that end early when the flow quiesces."""

from __future__ import annotations

import asyncio
import contextlib
import time


async def sleep_unless(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep `seconds` or until `stop` is set; True when `stop` ended the wait."""
    if stop.is_set():
        return True
    if seconds <= 0:
        await asyncio.sleep(0)
        return stop.is_set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


class Ticker:
    """A fixed-rate schedule that never bursts to catch up after a stall."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._next = time.monotonic() + interval_s

    def delay(self) -> float:
        """Seconds until the next tick is due (<= 0: due now)."""
        return self._next - time.monotonic()

    def advance(self) -> None:
        """Move to the next tick; after a stall longer than one interval, restart from now."""
        now = time.monotonic()
        self._next += self.interval_s
        if self._next < now:
            self._next = now + self.interval_s
