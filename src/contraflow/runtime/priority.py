"""What a flow's priority changes: its Spark pool, its per-batch admission and its sources' turns.

A flow's reserved arg `priority` ("critical", "high", "normal", "low",
"background") acts in three places, all scaled from one table:

- its pipelines' queries run in the Spark FAIR pool of that name
  (`contraflow.spark.pools`: weight and `minShare`, so on two cores a
  critical batch's tasks are scheduled before a background one's);
- admission: the credit the flow monitor publishes for a pipeline's inputs
  is capped at `admission` records per micro-batch. Under a backlog a batch's
  fixed costs (planning, offset and state commits, the stateful stage) are
  paid once per batch, so `normal` admits about what a default channel
  sustains (0.4 of its capacity): on w1 the JVM's CPU per event fell from
  1.5-2.0 to 1.1-1.3 us with 1.2M-record batches against 400k. A
  low-priority query runs smaller batches whose tasks free the cores sooner, so it cannot hold
  them for long, yet it always gets a batch (it never starves);
- its source connectors yield the event loop after `yield_events` events or
  `QUANTUM_S` of work per turn (Torvyn's figures), never more than
  `YIELD_CEILING` events.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from contraflow.api.facade import Priority

QUANTUM_S = 100e-6  # a turn's time budget
YIELD_CEILING = 256  # no budget lets a source run more events than this without yielding


@dataclass(frozen=True)
class PriorityClass:
    """One priority's figures."""

    admission: int  # records one micro-batch of a pipeline may read from each input
    yield_events: int  # events a source handles per turn of the event loop


PRIORITY_CLASSES: dict[Priority, PriorityClass] = {
    "critical": PriorityClass(admission=2_400_000, yield_events=128),
    "high": PriorityClass(admission=1_600_000, yield_events=64),
    "normal": PriorityClass(admission=1_200_000, yield_events=32),
    "low": PriorityClass(admission=20_000, yield_events=16),
    "background": PriorityClass(admission=5_000, yield_events=8),
}


def admitted(priority: Priority, credit: int | None) -> int:
    """The credit a pipeline's next batch gets: the room downstream, capped by its admission."""
    admission = PRIORITY_CLASSES[priority].admission
    return admission if credit is None else min(credit, admission)


class YieldBudget:
    """Counts a source's events and yields the loop once its priority's turn is spent."""

    def __init__(self, priority: Priority, quantum_s: float = QUANTUM_S) -> None:
        self.events = min(PRIORITY_CLASSES[priority].yield_events, YIELD_CEILING)
        self.quantum_s = quantum_s
        self._spent = 0
        self._turn_began = time.perf_counter()

    async def spend(self, events: int) -> None:
        """Account `events` just handled; yield when the turn's events or its quantum are used up."""
        self._spent += max(1, events)
        if self._spent >= self.events or time.perf_counter() - self._turn_began >= self.quantum_s:
            await asyncio.sleep(0)
            self._spent = 0
            self._turn_began = time.perf_counter()
