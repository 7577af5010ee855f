"""The event-time watermark of a node (a window closed by the watermark, or a join), from how far
each input partition has got.

Each input partition of a pipeline (on Spark: topic and partition; in a local
executor: the input port) is read at its own pace: a Spark micro-batch takes
a share of every partition's backlog, so a partition whose events are older
in event time trails another by a whole batch or more. A watermark taken from
the highest time seen over all partitions would call the trailing
partition's events late although nothing about them is. So a node keeps, per
input partition that delivered events to it, the highest event time that
partition delivered (its *high*), and its watermark is the smallest high
(over both sides, for a join) minus the node's allowance (`lateness`, or a
join's `within`). It never goes back. This is Flink's rule (an operator's
watermark is the minimum over its input channels). Spark's is one global
value per query, computed between micro-batches from the highest event time
of all rows so far (with several watermarked inputs, the minimum over them
by default); rows read in the same micro-batch are never late for each
other, but a partition that trails by more than a batch has its rows dropped.

A partition that stops delivering would hold the watermark back for good
(Flink calls such a source idle and forgets it after a configured timeout).
Here a partition is forgotten once an event from another partition reaches
the node with an ingest time IDLE_AFTER_NS past the last ingest time of its
own events; when it delivers again it counts again from that event on (and
what it delivers behind the watermark by then is late). Ingest times are
part of the log, so this does not depend on how events fall into
micro-batches: a restarted query decides exactly as an uninterrupted one.
With a single input partition nothing changes: the watermark is the highest
event time seen minus the allowance.
"""

from __future__ import annotations

from typing import Any

from contraflow.pipeline.base import Context

# Ingest time (ns) a partition may deliver nothing to a node while others deliver before the
# node stops waiting for it: well above a micro-batch and the runtime's flush intervals, so a
# partition merely read in the next micro-batch is never taken for idle.
IDLE_AFTER_NS = 30_000_000_000


class InputProgress:
    """Per input partition that delivered events to one node (or join side): the highest event
    time it delivered and the ingest time of its last event."""

    __slots__ = ("highs", "ingested")

    def __init__(self) -> None:
        self.highs: dict[str, int] = {}
        self.ingested: dict[str, int] = {}

    def observe(self, source: str, time: int, ingest_ns: int) -> None:
        high = self.highs.get(source)
        if high is None or time > high:
            self.highs[source] = time
        self.ingested[source] = ingest_ns
        if len(self.ingested) > 1:
            self._forget_idle(ingest_ns - IDLE_AFTER_NS)

    def _forget_idle(self, before_ns: int) -> None:
        for source in [s for s, ingest in self.ingested.items() if ingest < before_ns]:
            del self.highs[source], self.ingested[source]

    def low(self) -> int | None:
        """The smallest high: how far every partition still waited for has got (None: none is)."""
        return min(self.highs.values()) if self.highs else None

    def snapshot(self) -> Any:
        return {source: [high, self.ingested[source]] for source, high in self.highs.items()}

    def restore(self, state: Any) -> None:
        self.highs = {source: high for source, (high, _) in (state or {}).items()}
        self.ingested = {source: ingest for source, (_, ingest) in (state or {}).items()}


class Watermark:
    """The watermark of one node over `sides` inputs (1 for a window, 2 for a join)."""

    __slots__ = ("allowance", "sides", "mark")

    def __init__(self, allowance: int, sides: int = 1) -> None:
        self.allowance = allowance
        self.sides = [InputProgress() for _ in range(sides)]
        self.mark: int | None = None  # None until every side has had an event

    def observe(self, side: int, ctx: Context, time: int) -> None:
        """An event of event time `time` reached `side`; `ctx` says its input partition and
        ingest time."""
        self.sides[side].observe(ctx.partition, time, ctx.now_ns)
        lows = [progress.low() for progress in self.sides]
        if any(low is None for low in lows):
            return
        candidate = min(lows) - self.allowance  # type: ignore[type-var,operator]
        if self.mark is None or candidate > self.mark:
            self.mark = candidate

    def seen(self) -> bool:
        """Whether any event has been observed."""
        return self.mark is not None or any(progress.highs for progress in self.sides)

    def snapshot(self) -> Any:
        return {"mark": self.mark, "sides": [progress.snapshot() for progress in self.sides]}

    def restore(self, state: Any, highest: int | None = None) -> None:
        """Back to a `snapshot()`; or, from a state written before watermarks were kept per
        partition (`state` None), to the one `highest` event time it kept."""
        self.mark = state["mark"] if state else None
        for number, progress in enumerate(self.sides):
            progress.restore(state["sides"][number] if state else None)
        if state is None and highest is not None:
            self.mark = highest - self.allowance
