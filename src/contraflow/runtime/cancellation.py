"""Stopping a flow in tiers, each with a deadline, all within one ceiling.

Undeploy, `DELETE /v1/flows/{id}` and shutdown stop a flow through four
tiers. Each tier gets until its share of the ceiling (shares add up, so time
a tier did not need goes to the next) and is reported as a `cancel` runtime
event with how long it took and whether it finished or ran out of time:

1. `cooperative`: sources stop pulling, pipelines and sinks drain what is in
   their channels, offsets are committed;
2. `cancel_jobs`: the pipelines' Spark job groups (one per query run) are
   cancelled, which interrupts their running tasks (skipped when the flow
   drained: nothing is running);
3. `stop_queries`: each query is stopped; Spark kills the Python workers of
   interrupted tasks (`spark.python.task.killTimeout`);
4. `cancel_tasks`: connector tasks are told to stop, then cancelled, and
   connectors and SPU clients are closed.

The flow's `cancel = {"ceiling_s": N}` (default 10; shutdown by Ctrl-C or
SIGTERM: `shutdown_ceiling_s`, default 120) bounds the whole: work a tier could
not finish is abandoned (a thread stuck in a blocking call is left behind,
never waited for). A second Ctrl-C ends the cooperative tier at once
(`cut_short`). What was not delivered stays in the channel topics for the next
start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import Any, Literal

from contraflow.runtime.event_stream import EventStream

log = logging.getLogger("contraflow.runtime.cancellation")

Tier = Literal["cooperative", "cancel_jobs", "stop_queries", "cancel_tasks"]
# Each tier's share of the ceiling, in order.
TIER_SHARES: tuple[tuple[Tier, float], ...] = (
    ("cooperative", 0.7),
    ("cancel_jobs", 0.05),
    ("stop_queries", 0.15),
    ("cancel_tasks", 0.1),
)
Outcome = Literal["done", "timed out", "skipped", "failed"]


class TieredCancel:
    """Runs each tier's work within its deadline and reports it."""

    def __init__(self, flow_id: str, ceiling_s: float, events: EventStream) -> None:
        self.flow_id = flow_id
        self.ceiling_s = ceiling_s
        self.events = events
        self.started = time.monotonic()
        self.deadlines: dict[Tier, float] = {}
        share = 0.0
        for tier, part in TIER_SHARES:
            share += part
            self.deadlines[tier] = self.started + self.ceiling_s * share
        self.outcomes: dict[Tier, Outcome] = {}

    async def run(
        self, tier: Tier, work: Awaitable[Any] | None, cut_short: asyncio.Event | None = None
    ) -> Outcome:
        """Await `work` until the tier's deadline, or until `cut_short` is set (then it counts as
        timed out); None skips the tier (still reported)."""
        began = time.monotonic()
        budget = max(0.0, self.deadlines[tier] - began)
        outcome: Outcome = "skipped" if work is None else await _bounded(work, budget, cut_short)
        self.outcomes[tier] = outcome
        self.events.emit(
            "cancel",
            self.flow_id,
            tier=tier,
            outcome=outcome,
            elapsed_s=round(time.monotonic() - began, 3),
            deadline_s=round(budget, 3),
            total_s=round(time.monotonic() - self.started, 3),
        )
        return outcome


async def _bounded(work: Awaitable[Any], budget_s: float, cut_short: asyncio.Event | None) -> Outcome:
    """Await `work` for at most `budget_s` (or until `cut_short`); on timeout cancel it without
    waiting for it to obey."""
    task = asyncio.ensure_future(work)
    waits: set[asyncio.Future[Any]] = {task}
    if cut_short is not None:
        waits.add(asyncio.ensure_future(cut_short.wait()))
    await asyncio.wait(waits, timeout=budget_s, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waits - {task}:
        waiter.cancel()
    if not task.done():
        task.cancel()
        task.add_done_callback(_swallow)  # it may finish much later (a thread it awaits)
        return "timed out"
    error = task.exception()
    if error is not None:
        log.error("stopping a flow: %s", error, exc_info=error)
        return "failed"
    return "done"


def _swallow(task: asyncio.Future[Any]) -> None:
    with contextlib.suppress(asyncio.CancelledError, Exception):
        task.exception()
