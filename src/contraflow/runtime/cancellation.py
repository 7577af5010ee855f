"""Stopping a flow in tiers, each with a deadline, all within one ceiling.

Undeploy, `DELETE /v1/flows/{id}` and shutdown stop a flow through four
tiers. The forced tiers (2-4) share the last 30 % of the ceiling (at most
FORCED_S seconds), the cooperative tier has the time before. Each tier
runs until its deadline (time a tier did not need goes to the next) and is
reported as a `cancel` runtime event with how long it took and whether it
finished or ran out of time:

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
from collections.abc import Awaitable, Coroutine
from typing import Any, Literal

from contraflow.errors import UserError
from contraflow.runtime.event_stream import EventStream

log = logging.getLogger("contraflow.runtime.cancellation")

Tier = Literal["cooperative", "cancel_jobs", "stop_queries", "cancel_tasks"]
# The forced tiers need time of their own, but not more with a larger ceiling: stopping a query
# whose batch was cancelled took 5 s on the loaded 2-core box (the sink's abort runs in a Python
# worker). They get FORCED_SHARE of the ceiling, at most FORCED_S; the cooperative tier the rest.
FORCED_SHARE = 0.3
FORCED_S = 5.0
# Each forced tier's share of that reserve, in order.
FORCED_SHARES: tuple[tuple[Tier, float], ...] = (
    ("cancel_jobs", 0.1),
    ("stop_queries", 0.6),
    ("cancel_tasks", 0.3),
)
Outcome = Literal["done", "timed out", "skipped", "failed"]


class TieredCancel:
    """Runs each tier's work within its deadline and reports it."""

    def __init__(self, flow_id: str, ceiling_s: float, events: EventStream) -> None:
        self.flow_id = flow_id
        self.ceiling_s = ceiling_s
        self.events = events
        self.started = time.monotonic()
        forced = min(FORCED_S, ceiling_s * FORCED_SHARE)
        self.deadlines: dict[Tier, float] = {"cooperative": self.started + ceiling_s - forced}
        share = 0.0
        for tier, part in FORCED_SHARES:
            share += part
            self.deadlines[tier] = self.started + ceiling_s - forced * (1 - share)
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


class QueryStops:
    """Pipeline query stops under way, by pipeline (`flow/alias`), including those that outlived
    their tier: Spark refuses to start a query while one of the same name is still active, so a
    redeploy of the same flow waits for them (`wait_for`)."""

    def __init__(self) -> None:
        self._stops: dict[str, asyncio.Task[Any]] = {}

    def track(self, pipeline: str, stop: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `stop` as a task no tier's timeout can cancel (await it through `asyncio.shield`)."""
        task = asyncio.ensure_future(stop)
        self._stops[pipeline] = task
        task.add_done_callback(_swallow)
        task.add_done_callback(lambda done: self._forget(pipeline, done))
        return task

    def _forget(self, pipeline: str, task: asyncio.Task[Any]) -> None:
        if self._stops.get(pipeline) is task:
            del self._stops[pipeline]

    async def wait_for(self, pipeline: str, timeout_s: float) -> None:
        """Return once no stop of `pipeline` is under way; UserError after `timeout_s`."""
        task = self._stops.get(pipeline)
        if task is None:
            return
        log.info("pipeline %s: waiting for its last run to stop", pipeline)
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            raise UserError(
                f"pipeline {pipeline} is still stopping ({timeout_s:.0f}s after its last undeploy); "
                "deploy again later"
            )
