"""Windows of a select, per group, chained as tilt frames (Tremor's semantics, plus sliding windows).

Each group owns one `Frame` per window of the select. A count window (`size`)
takes the event in and then closes when it is full. A time window
(`interval`) opens at the time of its first event and closes when an event's
time (the window `script`'s value, else the ingest time) or a tick reaches
the end; the event that closed it starts the next window. A closing frame
emits the select's target over its aggregates and folds them into the next
frame (that frame counts one step per merged window). Groups whose frames are
all empty are dropped, so idle keys cost nothing.

A state window (Tremor 0.13) keeps a `state` per group that its script updates on
each event, answering `emit` (bool) or `[emit, include]`: with `include` the event
joins the window that is emitted, without it the next one.

A sliding window (beyond Tremor) is kept as panes of `slide` events (or ns):
when a pane closes it joins the last `size / slide` (or `interval / slide`)
panes, and the window over them is emitted (a count window once it is full, a
time window whenever it holds events). Panes are merged with the aggregates'
`merge`, so each event is accumulated once whatever the overlap.
"""

from __future__ import annotations

from collections import deque
from typing import Any, TypeAlias

from contraflow.lang.errors import ScriptRuntimeError
from contraflow.lang.graph import PipelineGraph, WindowSpec
from contraflow.lang.script import ast as sast
from contraflow.lang.script.aggr import Aggregate
from contraflow.lang.script.compiler import CompiledScript, CompiledSelect, compile_expr, compile_script
from contraflow.lang.script.stdlib.win_ import WINDOW
from contraflow.pipeline.grouping import group_key, script_group
from contraflow.pipeline.item import copy_value

# What closing windows hand back, in order: (the select's target value, its group, the window's name).
Emitted: TypeAlias = list[tuple[Any, Any, str]]


class WindowScriptError(Exception):
    """A window script returned something that is not a non-negative integer."""


class Frame:
    """One window of one group: its aggregates, how many events/merges it holds, when it closes."""

    __slots__ = ("aggs", "n", "count", "next_ns", "panes", "state")

    def __init__(self, aggs: list[Aggregate], panes: int | None = None, state: Any = None) -> None:
        self.aggs = aggs
        self.n = 0
        self.count = 0
        self.next_ns: int | None = None
        self.state = state  # a state window's `state`
        # A sliding window's closed panes (aggregates, events in them), the newest last.
        self.panes: deque[tuple[list[Aggregate], int]] | None = None if panes is None else deque(maxlen=panes)

    def idle(self) -> bool:
        return not self.n and not self.count and not (self.panes and any(n for _, n in self.panes))


class Group:
    """One group's frames; `value` is its dimensions (what state keeps), `script` what scripts see."""

    __slots__ = ("value", "script", "frames")

    def __init__(self, value: list[Any] | None, frames: list[Frame]) -> None:
        self.value = value
        self.script = script_group(value)
        self.frames = frames


class Windows:
    """The groups and tilt frames of one windowed select, and how events and ticks move them."""

    def __init__(
        self, specs: list[WindowSpec], select: CompiledSelect, graph: PipelineGraph, node: str
    ) -> None:
        self.specs = specs
        self.select = select
        self.args = graph.args
        self.names = [spec.name for spec in specs]
        self.scripts: list[CompiledScript | None] = [
            compile_script(spec.script.ast, name=node, consts=graph.constants, fns=graph.functions)
            if spec.script is not None
            else None
            for spec in specs
        ]
        # A window script that is one plain expression (`event.ts`): its value without a script run.
        self.script_values = [
            _value_function(spec, node, graph) if not spec.has_state else None for spec in specs
        ]
        limits = [spec.max_groups for spec in specs if spec.max_groups is not None]
        self.max_groups = min(limits) if limits else None
        self.keep_empty = any(spec.emit_empty_windows for spec in specs)
        # Per window: how many panes a sliding window spans (None for a tumbling one).
        self.pane_counts = [_pane_count(spec) for spec in specs]
        # Time windows without a script follow processing time: ticks close them.
        self.ticking = specs[0].interval_ns is not None and self.scripts[0] is None
        self.groups: dict[Any, Group] = {}
        self.dropped = 0
        # The first window's interval when it follows ingest time (no script): `on_event` inlines it.
        self.clock_interval = (
            specs[0].interval_ns if self.scripts[0] is None and self.pane_counts[0] is None else None
        )
        # A time frame always holds the event just added, so only count and state windows can empty a group.
        self.evict_on_event = specs[0].size is not None or specs[0].has_state
        # Per aggregate: its argument functions (raw generated code, located on failure) and position.
        self.accumulators = [([a.fn for a in call.args], call.position) for call in select.aggregates]
        self.locators = [a.locator for call in select.aggregates for a in call.args]

    # --- events -----------------------------------------------------------------------------

    def on_event(
        self,
        dims: list[Any] | None,
        event: Any,
        meta: dict[str, Any],
        now_ns: int,
        emitted: Emitted,
    ) -> None:
        """Feed one event to its group; appends (target value, group, window name) for every closed window."""
        # `window_group_key(dims)`, inlined: this runs for every event.
        key = dims[0] if dims is not None and len(dims) == 1 and type(dims[0]) is str else group_key(dims)
        group = self.groups.get(key)
        if group is None:
            if self.max_groups is not None and len(self.groups) >= self.max_groups:
                self.dropped += 1
                return
            group = self.groups[key] = Group(dims, self._new_frames())
        interval = self.clock_interval
        if interval is not None:  # the common time window, inlined: see `_step`
            frame = group.frames[0]
            end = frame.next_ns
            if end is None:
                frame.next_ns = now_ns + interval
            elif end <= now_ns:
                frame.next_ns = now_ns + interval
                self._close(group, 0, event, meta, now_ns, emitted, None)
            self._add(group, 0, event, meta, None)
            return
        self._step(group, 0, event, meta, None, now_ns, emitted)
        if self.evict_on_event:
            self._evict_if_idle(key, group)

    def step_without_event(
        self, group: Group, time: int, now_ns: int, meta: dict[str, Any], emitted: Emitted
    ) -> None:
        """What an event of `group` at window time `time` does to the first frame's clock (it may
        close the window and emit), without the event: for a caller that adds the event's partials
        itself (see `contraflow.pipeline.spark.partial`) and has checked that nothing the close runs
        reads the event (the target, the higher windows' clocks)."""
        clock = now_ns if self.scripts[0] is None else time  # as `_event_time`
        if self._advance(group.frames[0], self.specs[0], clock):
            self._close(group, 0, None, meta, now_ns, emitted, None)

    def _step(
        self,
        group: Group,
        level: int,
        event: Any,
        meta: dict[str, Any],
        prev: list[Aggregate] | None,
        now_ns: int,
        emitted: Emitted,
        tick_ns: int | None = None,
    ) -> None:
        """Tremor's window step: decide include/close for this frame, close it, then add the event."""
        spec = self.specs[level]
        frame = group.frames[level]
        if spec.has_state:
            emit, include = self._state_actions(level, frame, event, meta)
            if include:
                self._add(group, level, event, meta, prev)
            if emit:
                self._close(group, level, event, meta, now_ns, emitted, tick_ns)
            if not include:
                self._add(group, level, event, meta, prev)
            return
        if self.pane_counts[level] is not None and spec.size is not None:
            self._add(group, level, event, meta, prev)  # a count pane closes with its last event
            frame.count += self._script_value(level, event, meta, 1)
            if frame.count >= (spec.slide or 1):
                frame.count = 0
                self._close_pane(group, level, event, meta, emitted)
            return
        if self.pane_counts[level] is not None:
            time = self._frame_time(level, event, meta, now_ns, tick_ns)
            self._slide(group, level, event, meta, time, emitted)
            self._add(group, level, event, meta, prev)
            return
        if spec.size is not None:
            count = frame.count + self._script_value(level, event, meta, 1)
            self._add(group, level, event, meta, prev)  # first: a failing event must not count
            if count >= spec.size:
                frame.count = count - spec.size
                self._close(group, level, event, meta, now_ns, emitted, tick_ns)
            else:
                frame.count = count
            return
        if self._advance(frame, spec, self._frame_time(level, event, meta, now_ns, tick_ns)):
            self._close(group, level, event, meta, now_ns, emitted, tick_ns)
        self._add(group, level, event, meta, prev)

    def _new_frames(self) -> list[Frame]:
        return [
            Frame(self.select.new_aggregates(), panes, copy_value(spec.state))
            for panes, spec in zip(self.pane_counts, self.specs, strict=True)
        ]

    def _state_actions(self, level: int, frame: Frame, event: Any, meta: dict[str, Any]) -> tuple[bool, bool]:
        """Run a state window's script: it updates `state` and answers `emit` or `[emit, include]`."""
        script = self.scripts[level]
        assert script is not None, "a state window has a script (checked when compiling)"
        result = script.run(event, meta, frame.state, self.args)
        frame.state = result.state
        answer = result.event
        if answer is True or answer is False:
            return answer, answer
        if type(answer) is list and len(answer) == 2 and all(a is True or a is False for a in answer):
            return answer[0], answer[1]
        raise WindowScriptError(
            f"the script of state window '{self.names[level]}' must give a bool or [emit, include], "
            f"got {'nothing (drop)' if result.dropped else repr(answer)}"
        )

    def _slide(
        self, group: Group, level: int, event: Any, meta: dict[str, Any], time: int, emitted: Emitted
    ) -> None:
        """Close a sliding time window's panes that `time` (the event's or the tick's) is past.

        Each pane boundary crossed emits the window ending there, up to one window's worth;
        a longer gap leaves nothing in the window.
        """
        spec, frame = self.specs[level], group.frames[level]
        slide = spec.slide or 1
        if frame.next_ns is None:
            frame.next_ns = time + slide
            return
        if frame.next_ns > time:
            return
        crossed = (time - frame.next_ns) // slide + 1
        for _ in range(min(crossed, len(frame.panes or ()) + 1, self.pane_counts[level] or 1)):
            self._close_pane(group, level, event, meta, emitted)
        if crossed > (self.pane_counts[level] or 1) and frame.panes is not None:
            frame.panes.clear()  # everything before is older than the window
        frame.next_ns += crossed * slide

    def _close_pane(
        self, group: Group, level: int, event: Any, meta: dict[str, Any], emitted: Emitted
    ) -> None:
        """Move the open pane into the window and emit the window over its panes."""
        frame = group.frames[level]
        assert frame.panes is not None
        frame.panes.append((frame.aggs, frame.n))
        frame.aggs, frame.n = self.select.new_aggregates(), 0
        full = len(frame.panes) == frame.panes.maxlen
        if (self.specs[level].size is not None and not full) or not any(n for _, n in frame.panes):
            return
        merged = self.select.new_aggregates()
        for aggs, n in frame.panes:
            if n:
                for total, pane in zip(merged, aggs, strict=True):
                    total.merge(pane)
        name = self.names[level]
        emitted.append((self._emit(merged, event, meta, group, name), group.script, name))

    def _emit(self, aggs: list[Aggregate], event: Any, meta: dict[str, Any], group: Group, name: str) -> Any:
        """The select's target for a closing window; `win::cardinality()` reads the group count
        while it runs, and 0 again after it (outside a window)."""
        WINDOW.cardinality = len(self.groups) if group.value is not None else 0
        try:
            return self.select.emit(aggs, event, meta, None, self.args, group.script, name)
        finally:
            WINDOW.cardinality = 0

    def _frame_time(
        self, level: int, event: Any, meta: dict[str, Any], now_ns: int, tick_ns: int | None
    ) -> int:
        """The time a time frame's clock moves to: the tick's when ticking, else the event's."""
        return tick_ns if tick_ns is not None else self._event_time(level, event, meta, now_ns)

    def _event_time(self, level: int, event: Any, meta: dict[str, Any], now_ns: int) -> int:
        return now_ns if self.scripts[level] is None else self._script_value(level, event, meta, now_ns)

    def _script_value(self, level: int, event: Any, meta: dict[str, Any], default: int) -> int:
        script = self.scripts[level]
        if script is None:
            return default
        value_of = self.script_values[level]
        if value_of is None:
            value = script.run(event, meta, None, self.args).event
        else:
            try:
                value = value_of(event, meta, None, self.args, None, None)
            except Exception:  # noqa: BLE001 - the script run raises it with the script's position
                value = script.run(event, meta, None, self.args).event
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise WindowScriptError(
                f"the script of window '{self.names[level]}' must give a non-negative integer, got {value!r}"
            )
        return value

    @staticmethod
    def _advance(frame: Frame, spec: WindowSpec, time: int) -> bool:
        """Move a time frame's clock to `time`; True when the current window closes."""
        assert spec.interval_ns is not None
        if frame.next_ns is None:
            frame.next_ns = time + spec.interval_ns
            return False
        if frame.next_ns <= time:
            frame.next_ns = time + spec.interval_ns
            return True
        return False

    def _add(
        self, group: Group, level: int, event: Any, meta: dict[str, Any], prev: list[Aggregate] | None
    ) -> None:
        frame = group.frames[level]
        if prev is None:
            self._accumulate(frame.aggs, group.script, self.names[level], event, meta)
        else:
            for agg, done in zip(frame.aggs, prev, strict=True):
                agg.merge(done)
        frame.n += 1

    def _accumulate(
        self, aggs: list[Aggregate], value: list[Any] | None, window: str, event: Any, meta: dict[str, Any]
    ) -> None:
        """Add one event to a window's aggregates (`value` is its group, `window` its name)."""
        args = self.args
        for agg, (fns, position) in zip(aggs, self.accumulators):  # noqa: B905 - same length
            try:
                if not fns:
                    agg.accumulate()
                elif len(fns) == 1:
                    agg.accumulate(fns[0](event, meta, None, args, value, window))
                else:
                    agg.accumulate(*[fn(event, meta, None, args, value, window) for fn in fns])
            except ScriptRuntimeError as err:
                raise ScriptRuntimeError(err.message, err.position or position, err.node) from err

    def _close(
        self,
        group: Group,
        level: int,
        event: Any,
        meta: dict[str, Any],
        now_ns: int,
        emitted: Emitted,
        tick_ns: int | None,
    ) -> None:
        """Emit the frame's target (unless empty), fold it into the next frame, start a new window."""
        frame = group.frames[level]
        if frame.n > 0 or self.specs[level].emit_empty_windows:
            name = self.names[level]
            emitted.append((self._emit(frame.aggs, event, meta, group, name), group.script, name))
            if level + 1 < len(self.specs):
                self._step(group, level + 1, event, meta, frame.aggs, now_ns, emitted, tick_ns)
        for agg in frame.aggs:  # the next frame has merged them already: reuse the objects
            agg.init()
        frame.n = 0

    def _evict_if_idle(self, key: Any, group: Group) -> None:
        if self.keep_empty:
            return
        if all(frame.idle() for frame in group.frames):
            del self.groups[key]

    # --- processing time --------------------------------------------------------------------

    def tick(self, now_ns: int) -> Emitted:
        """Close every group's time window that ends at or before `now_ns`."""
        emitted: Emitted = []
        if not self.ticking:
            return emitted
        spec = self.specs[0]
        for key, group in list(self.groups.items()):
            frame = group.frames[0]
            if frame.next_ns is None or frame.next_ns > now_ns:
                continue
            if self.pane_counts[0] is not None:
                self._slide(group, 0, None, {}, now_ns, emitted)
                self._evict_if_idle(key, group)
            elif self._advance(frame, spec, now_ns):
                self._close(group, 0, None, {}, now_ns, emitted, now_ns)
                self._evict_if_idle(key, group)
        return emitted

    def deadline(self, latest: bool = False) -> int | None:
        """When the first (or last) group's open time window ends."""
        if not self.ticking:
            return None
        times = [g.frames[0].next_ns for g in self.groups.values() if g.frames[0].next_ns is not None]
        if not times:
            return None
        return max(times) if latest else min(times)

    # --- state --------------------------------------------------------------------------------

    def snapshot(self) -> Any:
        if not self.groups and not self.dropped:
            return None
        return {
            "groups": [[g.value, [_frame_state(f) for f in g.frames]] for g in self.groups.values()],
            "dropped": self.dropped,
        }

    def restore(self, state: Any) -> None:
        self.groups = {}
        self.dropped = 0
        if state is None:
            return
        calls = self.select.aggregates

        def aggregates(data: list[Any]) -> list[Aggregate]:
            return [call.cls.restore(d) for call, d in zip(calls, data, strict=True)]

        for dims, frames in state["groups"]:
            restored = []
            for level, (n, count, next_ns, aggs, *extra) in enumerate(frames):
                frame = Frame(aggregates(aggs), self.pane_counts[level])
                frame.n, frame.count, frame.next_ns = n, count, next_ns
                if extra and frame.panes is not None:
                    frame.panes.extend((aggregates(data), pane_n) for pane_n, data in extra[0])
                elif extra:  # a state window's state
                    frame.state = extra[0]["state"]
                restored.append(frame)
            self.groups[group_key(dims)] = Group(dims, restored)
        self.dropped = state.get("dropped", 0)


def window_group_key(dims: list[Any] | None) -> Any:
    """The key of a group in `Windows.groups`: a one-string group is its string."""
    return dims[0] if dims is not None and len(dims) == 1 and type(dims[0]) is str else group_key(dims)


def _frame_state(frame: Frame) -> list[Any]:
    state: list[Any] = [frame.n, frame.count, frame.next_ns, [a.snapshot() for a in frame.aggs]]
    if frame.panes is not None:
        state.append([[n, [a.snapshot() for a in aggs]] for aggs, n in frame.panes])
    elif frame.state is not None:
        state.append({"state": frame.state})
    return state


def _pane_count(spec: WindowSpec) -> int | None:
    """How many `slide`-long panes a sliding window spans; None for a tumbling window."""
    if spec.kind != "sliding":
        return None
    length = spec.size if spec.size is not None else spec.interval_ns
    return max(1, (length or 1) // (spec.slide or 1))


# Expressions that only compute a value: a script made of one of them is that value.
_VALUE_EXPRESSIONS = (sast.Literal, sast.Path, sast.Binary, sast.Unary, sast.Present, sast.Call)


def _value_function(spec: WindowSpec, node: str, graph: PipelineGraph) -> Any:
    """The compiled expression of a window script that is one value expression, else None."""
    script = spec.script.ast if spec.script is not None else None
    if script is None or script.fns or script.consts or script.uses or script.result_const:
        return None
    if len(script.exprs) != 1 or not isinstance(script.exprs[0], _VALUE_EXPRESSIONS):
        return None
    return compile_expr(script.exprs[0], name=node, consts=graph.constants, fns=graph.functions).fn
