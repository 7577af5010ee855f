"""Schedules for paced sources: a fixed-rate `Ticker` and a batching `Pacer` (sleeping: `contraflow.stopping`)."""

from __future__ import annotations

import time


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


class Pacer:
    """A fixed event rate handed out in batches: every event due so far, up to a limit per call.

    One event per wake-up cannot reach high rates (an asyncio sleep costs far
    more than 100 us), so a paced source asks `take` for everything due and
    sends it as one pull. Falling behind by more than `max_lag_s` (a stalled
    machine) drops the backlog instead of bursting it out: the rate reached is
    then lower than asked, which the caller reports.
    """

    def __init__(self, interval_s: float, max_lag_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.max_lag_s = max_lag_s
        self.skipped = 0  # events dropped from the schedule after stalls
        self._next = time.monotonic() + interval_s

    def delay(self) -> float:
        """Seconds until the next event is due (<= 0: due now)."""
        return self._next - time.monotonic()

    def take(self, limit: int) -> tuple[int, float]:
        """(events due now, at most `limit`; the monotonic time the first of them was due)."""
        now = time.monotonic()
        if self._next > now:
            return 0, self._next
        first = self._next
        count = min(limit, int((now - first) / self.interval_s) + 1)
        self._next = first + count * self.interval_s
        if now - self._next > self.max_lag_s:
            self.skipped += int((now - self._next) / self.interval_s)
            self._next = now + self.interval_s
        return count, first
