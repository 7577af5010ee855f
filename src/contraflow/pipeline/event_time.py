"""Windows closed by a watermark (beyond Tremor): `lateness` on time windows, and session windows.

Tremor closes a time window when the first event past its end arrives, so an
out-of-order event lands in whatever window is open. A window with `lateness`
(or a session window) follows a watermark instead, one per select (as Spark's
is global, not per group): the smallest, over the input partitions feeding the
select, of the highest event time each delivered, minus `lateness` (see
`contraflow.pipeline.watermark`: a partition read behind another makes no
event late). A window is emitted once the watermark reaches its end, in the order of
the ends (groups in the order they were scheduled); an event whose window has
already been reached is *late*: it raises `LateEvent` (the select sends it to
`err`) and is counted in `late`.

Time windows with `lateness` are aligned to multiples of their length (of
`slide` for a sliding window), as Spark's and Flink's are, so a late-but-allowed
event finds the window it belongs to. A sliding window keeps one pane of
`slide` ns per slide and merges the panes of each window it emits. An event in
several sliding windows of which only the first have been reached counts in the
others and is not late (as in Flink and Spark); it is late only once every
window holding it has been reached.

A session window holds one session per burst of events of a group: an event
joins every open session it is less than `gap` from (a late event may bridge two,
which then merge), and a session closes when the watermark reaches `gap` after
its last event, or `max_duration` after its start. An event that joins no open
session and whose own session would already be closed is late.

State is bounded by the watermark: a window or session leaves it when emitted.
The event time is the window `script`'s value, else the ingest time. Ticks do
nothing here: only event time closes these windows.
"""

from __future__ import annotations

import heapq
from typing import Any

from contraflow.lang.graph import PipelineGraph, WindowSpec
from contraflow.lang.script.aggr import Aggregate
from contraflow.lang.script.compiler import CompiledSelect
from contraflow.pipeline.base import Context
from contraflow.pipeline.grouping import group_key
from contraflow.pipeline.watermark import Watermark
from contraflow.pipeline.windows import Emitted, Group, Windows, window_group_key


class LateEvent(Exception):
    """An event older than the watermark whose window was already emitted."""

    def __init__(self, window: str, event_time: int, watermark: int, kind: str = "window") -> None:
        done = (
            "which has already emitted its window" if kind == "window" else "whose events that old are gone"
        )
        super().__init__(
            f"late event: its time {event_time} is behind the watermark {watermark} of {kind} '{window}', {done}"
        )
        self.window = window
        self.event_time = event_time
        self.watermark = watermark

    def fields(self) -> dict[str, Any]:
        """What the error event carries besides the message: the window, the watermark, the time."""
        return {
            "late": True,
            "window": self.window,
            "watermark": self.watermark,
            "event_time": self.event_time,
        }


class Pane:
    """The aggregates of the events of one pane (or session) of one group."""

    __slots__ = ("aggs", "n", "start", "last")

    def __init__(self, aggs: list[Aggregate], start: int, last: int, n: int = 0) -> None:
        self.aggs = aggs
        self.n = n
        self.start = start
        self.last = last  # a session's last event time (unused for panes)


class TimedGroup(Group):
    """A group's panes (or sessions), when its next window is due, and the heap entry that says so."""

    __slots__ = ("due", "seq", "panes", "upto")

    def __init__(self, value: list[Any] | None) -> None:
        super().__init__(value, [])
        self.due: int | None = None
        self.seq = 0
        self.panes: list[Pane] = []  # by start
        self.upto: int | None = None  # the end of the last window emitted (aligned windows)


class WatermarkWindows(Windows):
    """What aligned and session windows share: the watermark, the schedule, late events, state.

    `ctx` is the executor's context: it names the input partition of each event."""

    def __init__(
        self, specs: list[WindowSpec], select: CompiledSelect, graph: PipelineGraph, node: str, ctx: Context
    ) -> None:
        super().__init__(specs, select, graph, node)
        self.ctx = ctx
        self.spec = specs[0]
        self.name = self.spec.name
        self.lateness = self.spec.lateness_ns or 0
        self.ticking = False
        self.clock_interval = None
        self.timed: dict[Any, TimedGroup] = {}
        self.groups = self.timed  # type: ignore[assignment]  # `win::cardinality()` counts them
        self.progress = Watermark(self.lateness)
        self.schedule: list[tuple[int, int, Any]] = []  # (due, seq, group key), a heap
        self.seq = 0
        self.late = 0

    def watermark(self) -> int | None:
        return self.progress.mark

    def on_event(
        self,
        dims: list[Any] | None,
        event: Any,
        meta: dict[str, Any],
        now_ns: int,
        emitted: Emitted,
    ) -> None:
        """Place the event by its time (or refuse it as late), then emit what the watermark passed."""
        key = window_group_key(dims)
        time = self._event_time(0, event, meta, now_ns)
        group = self.timed.get(key)
        watermark = self.watermark()
        if watermark is not None and self._is_late(group, time, watermark):
            self.late += 1
            self.progress.observe(0, self.ctx, time)  # its partition is active again
            raise LateEvent(self.name, time, watermark)
        if group is None:
            if self.max_groups is not None and len(self.timed) >= self.max_groups:
                self.dropped += 1
                return
            group = self.timed[key] = TimedGroup(dims)
        try:
            self._place(group, time, event, meta)
        finally:
            if not group.panes:  # a new group whose first event failed in an aggregate
                del self.timed[key]
        self._reschedule(key, group)
        self.progress.observe(0, self.ctx, time)
        self._fire(event, meta, emitted)

    def _fire(self, event: Any, meta: dict[str, Any], emitted: Emitted) -> None:
        """Emit every window the watermark has reached, earliest first."""
        watermark = self.watermark()
        schedule = self.schedule
        while schedule and watermark is not None and schedule[0][0] <= watermark:
            due, seq, key = heapq.heappop(schedule)
            group = self.timed.get(key)
            if group is None or group.due != due or group.seq != seq:
                continue  # superseded: the group was rescheduled or emptied since
            group.due = None
            self._close_due(group, due, event, meta, emitted)
            if group.panes:
                self._reschedule(key, group)
            else:
                del self.timed[key]

    def _reschedule(self, key: Any, group: TimedGroup) -> None:
        due = self._next_due(group)
        if due is None or due == group.due:
            return
        self.seq += 1
        group.due, group.seq = due, self.seq
        heapq.heappush(self.schedule, (due, self.seq, key))

    def _emit_pane(
        self, aggs: list[Aggregate], group: TimedGroup, event: Any, meta: dict[str, Any], emitted: list[Any]
    ) -> None:
        emitted.append((self._emit(aggs, event, meta, group, self.name), group.script, self.name))

    def _new_pane(self, start: int, last: int) -> Pane:
        return Pane(self.select.new_aggregates(), start, last)

    def _add_to(self, pane: Pane, group: TimedGroup, event: Any, meta: dict[str, Any]) -> None:
        self._accumulate(pane.aggs, group.script, self.name, event, meta)
        pane.n += 1

    # --- what aligned and session windows do differently ------------------------------------

    def _is_late(self, group: TimedGroup | None, time: int, watermark: int) -> bool:
        raise NotImplementedError

    def _place(self, group: TimedGroup, time: int, event: Any, meta: dict[str, Any]) -> None:
        raise NotImplementedError

    def _next_due(self, group: TimedGroup) -> int | None:
        raise NotImplementedError

    def _close_due(
        self, group: TimedGroup, due: int, event: Any, meta: dict[str, Any], emitted: list[Any]
    ) -> None:
        raise NotImplementedError

    # --- processing time: nothing (event time only) ----------------------------------------------

    def tick(self, now_ns: int) -> Emitted:
        return []

    def deadline(self, latest: bool = False) -> int | None:
        return None

    # --- state -----------------------------------------------------------------------------------

    def snapshot(self) -> Any:
        if not self.timed and not self.progress.seen() and not self.dropped and not self.late:
            return None
        return {
            "watermark": self.progress.snapshot(),
            "late": self.late,
            "dropped": self.dropped,
            "seq": self.seq,
            "groups": [
                [
                    g.value,
                    g.upto,
                    g.seq,
                    [[p.start, p.last, p.n, [a.snapshot() for a in p.aggs]] for p in g.panes],
                ]
                for g in self.timed.values()
            ],
        }

    def restore(self, state: Any) -> None:
        self.timed.clear()
        self.schedule = []
        self.late, self.dropped, self.seq = 0, 0, 0
        self.progress.restore(state and state.get("watermark"), state and state.get("max_seen"))
        if state is None:
            return
        calls = self.select.aggregates
        self.late, self.dropped = state["late"], state["dropped"]
        for dims, upto, seq, panes in state["groups"]:
            group = self.timed[group_key(dims)] = TimedGroup(dims)
            group.upto = upto
            for start, last, n, aggs in panes:
                restored = [call.cls.restore(d) for call, d in zip(calls, aggs, strict=True)]
                group.panes.append(Pane(restored, start, last, n))
            # The heap entry it had, so groups due at the same time emit in the same order as before.
            self.seq = seq - 1
            self._reschedule(group_key(dims), group)
        self.seq = state["seq"]


class AlignedWindows(WatermarkWindows):
    """Tumbling or sliding time windows with `lateness`, aligned to multiples of their length/slide."""

    def __init__(
        self, specs: list[WindowSpec], select: CompiledSelect, graph: PipelineGraph, node: str, ctx: Context
    ) -> None:
        super().__init__(specs, select, graph, node, ctx)
        assert self.spec.interval_ns is not None, "lateness needs `interval` (checked when compiling)"
        self.length = self.spec.interval_ns
        self.slide = self.spec.slide if self.spec.kind == "sliding" and self.spec.slide else self.length

    def _is_late(self, group: TimedGroup | None, time: int, watermark: int) -> bool:
        """Late when the last window holding the event ends at or before the watermark (every
        window it belongs to has been reached), as in Flink and Spark."""
        return time - time % self.slide + self.length <= watermark

    def _place(self, group: TimedGroup, time: int, event: Any, meta: dict[str, Any]) -> None:
        """Add the event to its pane. A sliding window's event may arrive after the first windows
        holding it were reached: it counts only in the windows still open, so the group never
        emits a window the watermark had reached before this event."""
        watermark = self.watermark()
        if watermark is not None:
            reached = watermark - watermark % self.slide  # windows end on multiples of the slide
            group.upto = reached if group.upto is None else max(group.upto, reached)
        start = time - time % self.slide
        panes = group.panes
        index = len(panes)
        while index and panes[index - 1].start > start:
            index -= 1
        if index and panes[index - 1].start == start:
            self._add_to(panes[index - 1], group, event, meta)
        else:
            pane = self._new_pane(start, start)
            self._add_to(pane, group, event, meta)  # first: a failing event leaves no pane
            panes.insert(index, pane)

    def _next_due(self, group: TimedGroup) -> int | None:
        """The end of the first window holding the oldest pane that no emitted window ends after."""
        if not group.panes:
            return None
        due = group.panes[0].start + self.slide
        return due if group.upto is None else max(due, group.upto + self.slide)

    def _close_due(
        self, group: TimedGroup, due: int, event: Any, meta: dict[str, Any], emitted: list[Any]
    ) -> None:
        """Emit the window ending at `due`, then drop the panes no later window holds."""
        begin = due - self.length
        inside = [pane for pane in group.panes if begin <= pane.start < due]
        if len(inside) == 1:
            aggs = inside[0].aggs
        else:
            aggs = self.select.new_aggregates()
            for pane in inside:
                for total, part in zip(aggs, pane.aggs, strict=True):
                    total.merge(part)
        self._emit_pane(aggs, group, event, meta, emitted)
        group.upto = due
        group.panes = [pane for pane in group.panes if pane.start + self.length > due]


class SessionWindows(WatermarkWindows):
    """Session windows: per group, bursts of events closer than `gap` to each other."""

    def __init__(
        self, specs: list[WindowSpec], select: CompiledSelect, graph: PipelineGraph, node: str, ctx: Context
    ) -> None:
        super().__init__(specs, select, graph, node, ctx)
        assert self.spec.gap_ns is not None, "a session window has a `gap` (checked when compiling)"
        self.gap = self.spec.gap_ns
        self.max_duration = self.spec.max_duration_ns

    def _closes_at(self, session: Pane) -> int:
        end = session.last + self.gap
        return end if self.max_duration is None else min(end, session.start + self.max_duration)

    def _joins(self, session: Pane, time: int) -> bool:
        """The event is less than `gap` from the session (and keeps it within `max_duration`)."""
        if not (session.start - self.gap < time < session.last + self.gap):
            return False
        return (
            self.max_duration is None
            or max(session.last, time) - min(session.start, time) < self.max_duration
        )

    def _is_late(self, group: TimedGroup | None, time: int, watermark: int) -> bool:
        if time + self.gap > watermark:
            return False
        return group is None or not any(self._joins(session, time) for session in group.panes)

    def _place(self, group: TimedGroup, time: int, event: Any, meta: dict[str, Any]) -> None:
        """Join (and so merge) the sessions the event is close to, or open a new one."""
        joined = [session for session in group.panes if self._joins(session, time)]
        if not joined:
            session = self._new_pane(time, time)
            self._add_to(session, group, event, meta)  # first: a failing event leaves no session
            group.panes.append(session)
            group.panes.sort(key=lambda s: s.start)
            return
        session = joined[0]
        for other in joined[1:]:
            for total, part in zip(session.aggs, other.aggs, strict=True):
                total.merge(part)
            session.n += other.n
            session.start = min(session.start, other.start)
            session.last = max(session.last, other.last)
        if len(joined) > 1:
            group.panes = [s for s in group.panes if not any(s is other for other in joined[1:])]
        session.start = min(session.start, time)
        session.last = max(session.last, time)
        self._add_to(session, group, event, meta)

    def _next_due(self, group: TimedGroup) -> int | None:
        return min((self._closes_at(session) for session in group.panes), default=None)

    def _close_due(
        self, group: TimedGroup, due: int, event: Any, meta: dict[str, Any], emitted: list[Any]
    ) -> None:
        """Emit the session that closes at `due` (the earliest to start, if several)."""
        session = next(s for s in group.panes if self._closes_at(s) == due)
        group.panes = [s for s in group.panes if s is not session]
        self._emit_pane(session.aggs, group, event, meta, emitted)


def watermark_windows(
    specs: list[WindowSpec], select: CompiledSelect, graph: PipelineGraph, node: str, ctx: Context
) -> Windows:
    """The windows of a select: watermark-closed ones when its (only) window asks for it."""
    if specs[0].kind == "session":
        return SessionWindows(specs, select, graph, node, ctx)
    if specs[0].lateness_ns is not None:
        return AlignedWindows(specs, select, graph, node, ctx)
    return Windows(specs, select, graph, node)
