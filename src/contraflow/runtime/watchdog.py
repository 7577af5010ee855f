"""Watchdogs: the runtime's event loop, and per flow its micro-batches, sends and pulls.

`watch_loop` wakes every `interval_s` and measures how late it woke; a late
wake-up means something ran on the loop without yielding (a blocking call in
a connector, a huge decode). `FlowWatchdog.check` runs on every monitor tick
of a flow and reports a pipeline whose micro-batch ran past
`batch_deadline_ms` (a finished batch that took too long, or input waiting
while no batch has finished for that long) and a connector whose `send()` or
`pull()` has been running past its deadline.

Each report is one `watchdog` runtime event naming the flow, the node and how
long (`what`: `loop`, `batch`, `send`, `pull`) and a count in
`contraflow_watchdog_warnings_total`. A stall is reported once, not every tick.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

from contraflow.runtime.event_stream import EventStream
from contraflow.runtime.metrics import RuntimeMetrics
from contraflow.runtime.settings import WatchdogSettings


async def watch_loop(
    events: EventStream,
    metrics: RuntimeMetrics | None = None,
    interval_s: float = 0.25,
    threshold_s: float = 0.5,
) -> None:
    """Run until cancelled, reporting whenever the loop was blocked for more than `threshold_s`."""
    while True:
        before = time.monotonic()
        await asyncio.sleep(interval_s)
        blocked = time.monotonic() - before - interval_s
        if blocked > threshold_s:
            events.emit("watchdog", what="loop", elapsed_s=round(blocked, 3), threshold_s=threshold_s)
            if metrics is not None:
                metrics.watchdog_warning("", "", "loop")


class FlowWatchdog:
    """Deadlines of one flow's pipelines and connectors, checked on each monitor tick."""

    def __init__(
        self, flow_id: str, settings: WatchdogSettings, events: EventStream, metrics: RuntimeMetrics
    ) -> None:
        self.flow_id = flow_id
        self.settings = settings
        self.events = events
        self.metrics = metrics
        self._reported: set[tuple[str, str, float]] = set()  # (what, node, since): one report per stall

    def check(
        self,
        batches: dict[str, tuple[float, float]],
        input_waiting: Callable[[str], bool],
        busy: Iterable[tuple[str, str, float | None]],
        now: float | None = None,
    ) -> None:
        """`batches`: pipeline -> (when its last batch finished, its duration); `busy`: (what,
        connector, since when its send/pull runs, or None when idle)."""
        now = time.monotonic() if now is None else now
        batch_s = self.settings.batch_deadline_ms / 1000
        for alias, (finished_at, duration_s) in batches.items():
            if not batch_s:
                break
            if duration_s > batch_s:
                self._report("batch", alias, finished_at - duration_s, duration_s, batch_s, state="finished")
            elif now - finished_at > batch_s and input_waiting(alias):
                self._report("batch", alias, finished_at, now - finished_at, batch_s, state="running")
        for what, alias, since in busy:
            deadline_s = (
                self.settings.send_deadline_ms if what == "send" else self.settings.pull_deadline_ms
            ) / 1000
            if since is not None and deadline_s and now - since > deadline_s:
                self._report(what, alias, since, now - since, deadline_s)

    def _report(
        self, what: str, node: str, since: float, elapsed_s: float, deadline_s: float, **extra: Any
    ) -> None:
        key = (what, node, since)
        if key in self._reported:
            return
        self._reported.add(key)
        self.events.emit(
            "watchdog",
            self.flow_id,
            what=what,
            node=node,
            elapsed_s=round(elapsed_s, 3),
            deadline_s=deadline_s,
            **extra,
        )
        self.metrics.watchdog_warning(self.flow_id, node, what)
