"""Partial aggregation before the shuffle: a windowed select's events folded per group in the read task.

A split pipeline whose stateful rest is one windowed select (see
`partial_select`) would send every event across the shuffle, to be decoded
and run through the executor one by one in `transformWithState`. Instead the
read task (`PackEvents`, after the stateless prefix) folds runs of events into
*segments*, and only a segment's first event (its *head*) crosses, carrying
the partial aggregates of the segment (`contraflow.lang.script.aggr`: each
aggregate's exact partial).

Why a segment is exact (Tremor's time window, see `contraflow.pipeline.windows`:
the window is not aligned; it closes on the first event whose time reaches its
end, and the next one ends an interval after that event): once the head of
time `t` is in, the open window ends after `t`. So a later event of the same
group with time <= `t` can neither close the window nor be anything but
accumulated into it. A segment is a head and the following events of its group
with time <= the head's, the same ingest time (so no other partition's events
fall between them in `arrival_order`), and nothing in between that had to stay
an ordinary event. Other groups' events in between do not see the segment's
events (they only add to an existing group).

In the stateful stage (`merge_partials`), a head whose time is before the open
window's end is folded in with its segment (nothing closes); any other head
runs through the executor as the event it is (it may open a group, close
windows and emit, feed tilt frames, meet `max_groups`, fail), and then the
rest of its segment is folded in. Events the read task cannot fold exactly
(a failing `where`, group key, window script or aggregate argument, a group
value that is not a scalar, a value a partial cannot carry) stay ordinary
events, in their place, and end every open segment.

Only tumbling time windows (event time by a script, or ingest time) at the
first level with aggregates that have an exact partial are folded; count,
sliding and state windows, `group by set/each`, float sums and the other
aggregates keep the per-event path (decided per pipeline when it starts).
After a columnar prefix (no items to read) selects of `count()`, `min`, `max`,
`first` and `last` fold, on the prefix's columns
(`contraflow.pipeline.spark.columnar_fold`), batch by batch where the columns
answer every row.

Later steps: with event times that rise (most streams), nearly every event of
a group in a new millisecond would head a segment. When the select's close
needs nothing of the closing event (`closes_without_event`) and the fold runs
on columns, a segment instead takes its group's whole stretch within one run
of equal ingest times (and one metadata): its head, then the *steps*, the
events whose time exceeds all before them in the stretch, each with its time
and the count of events up to the next step. Only the head crosses as an
event. The stateful side (`StepsLeft`) adds every step before the open
window's end in one addition and runs only the step that reaches it, in its
event's place among the call's rows (`PLACE_COLUMN`), as the event would
(`SelectRunner.step_group`: the window closes and emits with the head's
metadata), then goes on from the new window's end.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contraflow.lang.graph import PipelineGraph, SelectSpec, SourceExpr
from contraflow.lang.script import ast as sast
from contraflow.lang.script.stdlib.system_ import INGEST_CLOCK
from contraflow.pipeline.base import Context
from contraflow.pipeline.columnar import ColumnarTraced
from contraflow.pipeline.executor import Traced
from contraflow.pipeline.grouping import script_group
from contraflow.pipeline.item import opened
from contraflow.pipeline.select import SelectRunner
from contraflow.pipeline.spark.columnar_fold import ColumnarFold
from contraflow.pipeline.spark.columnar_partials import KINDS, ColumnAggregate
from contraflow.pipeline.windows import Frame, Group, Windows, window_group_key

# The envelope column holding a head's segment (JSON, see `Segment.encode`); null for an ordinary event.
PARTIAL_COLUMN = "partial"
PARTIAL_FIELD = pa.field(PARTIAL_COLUMN, pa.binary())
# Each row's place among its batch's rows left after folding, before the split by key: where a
# segment's later steps fall among the rows of its envelope (see `StepsLeft`).
PLACE_COLUMN = "place"
PLACE_FIELD = pa.field(PLACE_COLUMN, pa.int32())
# The column `arrival_order` numbers each envelope's rows with (one number per envelope).
ENVELOPE_COLUMN = "envelope"

_SCALARS = (str, int, float, bool, type(None))


def partial_select(rest: PipelineGraph) -> str | None:
    """The select of a split pipeline's stateful rest whose events may be folded before the shuffle.

    The rest must be one windowed select fed by one cut port, grouped by one
    expression (or not grouped), whose first window is a tumbling time window
    and whose aggregates all have an exact partial.
    """
    nodes = [node for node in rest.nodes.values() if node.kind not in ("input", "output")]
    if len(nodes) != 1 or len(rest.inputs) != 1:
        return None
    node = nodes[0]
    spec = node.spec
    if not isinstance(spec, SelectSpec) or not spec.windows:
        return None
    if spec.group_by is not None and spec.group_by.mode != "expr":
        return None
    first = spec.windows[0]
    if first.kind != "tumbling" or first.interval_ns is None or first.size is not None or first.has_state:
        return None
    if first.watermarked:  # windows closed by the watermark run per event (`pipeline.event_time`)
        return None
    runner = _select_runner(rest, node.name)
    assert runner.windows is not None
    if not all(call.cls.partial_exact for call in runner.windows.select.aggregates):
        return None
    return node.name


# Calls a window's target may make for its close to run without the closing event: they read
# only the window's aggregates and the group count, and never fail.
_EVENT_FREE_CALLS = frozenset({"aggr::stats::count", "win::cardinality"})


def closes_without_event(spec: SelectSpec) -> bool:
    """Whether the select's first window can close on a step the read task folded (no event at
    hand): no `having`, higher windows whose clocks do not read the event, and a target that reads
    neither the event nor its metadata and cannot fail (literals, records of them, `group`,
    `group[0]`, `window`, counts, `win::cardinality()`)."""
    if spec.having is not None or any(w.script is not None or w.has_state for w in spec.windows[1:]):
        return False
    return _event_free(spec.target.ast, grouped=spec.group_by is not None)


def _event_free(node: Any, grouped: bool) -> bool:
    if isinstance(node, sast.Literal):
        return True
    if isinstance(node, sast.RecordLit):
        return all(
            isinstance(k, sast.Literal) and type(k.value) is str and _event_free(v, grouped)
            for k, v in node.fields
        )
    if isinstance(node, sast.ArrayLit):
        return all(_event_free(item, grouped) for item in node.items)
    if isinstance(node, sast.Path):
        if node.root == "window" or (node.root == "group" and not node.segments):
            return not node.segments
        return node.root == "group" and grouped and _is_first_index(node.segments)
    return isinstance(node, sast.Call) and node.name in _EVENT_FREE_CALLS and not node.args


def _is_first_index(segments: tuple[Any, ...]) -> bool:
    """`[0]`: a `group by <expr>` group has exactly one value."""
    if len(segments) != 1 or not isinstance(segments[0], sast.IndexSeg):
        return False
    index = segments[0].index
    return isinstance(index, sast.Literal) and type(index.value) is int and index.value == 0


def _select_runner(graph: PipelineGraph, name: str) -> SelectRunner:
    return SelectRunner(graph.nodes[name], Context(), name, graph)


class Segment:
    """A head event and the events of its group folded after it (their partial aggregates).

    A plain class with slots: one is made for most events of a batch."""

    __slots__ = ("key", "time", "ingest_ns", "head", "tail", "members")

    def __init__(self, key: Any, time: int, ingest_ns: int, head: list[Any], tail: list[Any]) -> None:
        self.key = key  # the group's key in `Windows.groups`
        self.time = time  # the head's window time
        self.ingest_ns = ingest_ns
        self.head = head  # the head's own partials, one per aggregate
        self.tail = tail  # the rest of the segment's partials
        self.members: list[int] = []  # the rows folded into `tail`

    def encode(self) -> bytes:
        """[key, time, head partials, tail count, tail partials]; a key that is a group's JSON
        (not one string) travels as [that JSON text]."""
        key = self.key if self.key is None or type(self.key) is str else [self.key.decode()]
        return orjson.dumps([key, self.time, self.head, len(self.members), self.tail])


@dataclass(frozen=True)
class PartialAggregation:
    """Folds the events a split pipeline's prefix sends to `select` (through cut port `port`)
    into segments: the producer side, run in the read task (picklable: plain data only)."""

    rest: PipelineGraph
    select: str
    port: str

    @cached_property
    def _runner(self) -> SelectRunner:
        return _select_runner(self.rest, self.select)

    @cached_property
    def columns(self) -> ColumnarFold | None:
        """The fold on columns after a columnar prefix, where the select allows it."""
        return columnar_fold(self.rest, self.select, self._runner)

    @property
    def reads(self) -> tuple[SourceExpr, ...]:
        """What the fold evaluates on the prefix's outputs (a columnar prefix parses its fields)."""
        return self.columns.reads if self.columns is not None else ()

    def collapse(self, traced: Traced, ingest: pa.Array) -> tuple[Traced, pa.Array]:
        """The prefix's outputs with every segment's events replaced by its head, and each row's
        segment (null for an ordinary row). `ingest` is each input row's ingest time.

        After a columnar prefix the fold runs on its columns (`contraflow.pipeline.spark.columnar_fold`)
        or not at all: folding event by event would decode every output again (6 µs/event on w1,
        more than the stateful stage saves). Without items otherwise (the prefix ran event by event
        after a failure) nothing is folded either."""
        if isinstance(traced, ColumnarTraced) and traced.outputs is not None:
            folded = self.columns.fold(traced, self.port, ingest) if self.columns is not None else None
            return folded if folded is not None else (traced, pa.nulls(traced.count, pa.binary()))
        if len(traced.items) != len(traced.ports):
            return traced, pa.nulls(len(traced.ports), pa.binary())
        return self.collapse_items(traced, ingest.to_pylist())

    def collapse_items(self, traced: Traced, ingest: list[int]) -> tuple[Traced, pa.Array]:
        """The fold event by event, with the select's own compiled code."""
        heads: dict[int, Segment] = {}
        folded: set[int] = set()  # rows folded into a segment, or dropped by `where`
        fold = _Folder(self._runner)
        open_segments: dict[Any, Segment] = {}
        last_ingest = None
        previous_clock, INGEST_CLOCK.source = INGEST_CLOCK.source, fold.ctx  # system::ingest_ns()
        try:
            for index, (port, item, source) in enumerate(
                zip(traced.ports, traced.items, traced.sources, strict=True)
            ):
                now = ingest[source]
                if now != last_ingest:  # a segment stays within one run of equal ingest times (module doc)
                    open_segments.clear()
                    last_ingest = now
                if port != self.port:
                    continue
                try:
                    segment, joined = fold.step(item, now, open_segments)
                except Exception:  # noqa: BLE001 - it stays an ordinary event, the executor reports it
                    open_segments.clear()
                    continue
                if segment is None or joined:  # dropped by `where` (it does nothing), or folded
                    folded.add(index)
                    if segment is not None:
                        segment.members.append(index)
                else:
                    heads[index] = open_segments[segment.key] = segment
        finally:
            INGEST_CLOCK.source = previous_clock
        return _rebuilt(traced, heads, folded)


class _Folder:
    """One event's step of `PartialAggregation.collapse`, with the select's own compiled code."""

    def __init__(self, runner: SelectRunner) -> None:
        windows = runner.windows
        assert windows is not None
        self.windows: Windows = windows
        self.where = runner.where_fn
        self.group_expr = runner.group_expr
        self.ctx = runner.ctx  # its `now_ns` is what system::ingest_ns() reads while folding
        self.sees_group = runner.calls_see_group  # an aggregate argument reads `group`
        self.args = runner.args
        self.window = windows.names[0]
        self.by_script = windows.scripts[0] is not None
        calls = windows.select.aggregates
        self.adders = [call.cls.add_to_partial for call in calls]
        self.arguments = [[arg.fn for arg in call.args] for call in calls]
        self.empty = [call.cls.EMPTY_PARTIAL for call in calls]
        self.no_arguments = not any(self.arguments)

    def step(self, item: list[Any], now: int, segments: dict[Any, Segment]) -> tuple[Segment | None, bool]:
        """The segment the event joins (True) or heads (a new one, False); None when `where`
        drops it. Raises for an event that must stay ordinary."""
        event, meta = opened(item)
        args = self.args
        self.ctx.now_ns = now
        if self.where is not None:
            keep = self.where(event, meta, None, args, None, None)
            if keep is False:
                return None, False
            if keep is not True:
                raise TypeError("`where` is not a boolean: the executor reports it")
        dims = None
        key: Any = None
        if self.group_expr is not None:
            value = self.group_expr(event, meta, None, args, None, None)
            if type(value) not in _SCALARS:
                raise TypeError("a group value that is not a scalar keeps the per-event path")
            dims = [value]
            key = value if type(value) is str else window_group_key(dims)
        time = self.windows._script_value(0, event, meta, now) if self.by_script else now
        segment = segments.get(key)
        if segment is not None and time <= segment.time and now == segment.ingest_ns:
            segment.tail = self._added(segment.tail, event, meta, dims)
            return segment, True
        return Segment(key, time, now, self._added(self.empty, event, meta, dims), self.empty), False

    def _added(
        self, partials: list[Any], event: Any, meta: dict[str, Any], dims: list[Any] | None
    ) -> list[Any]:
        """`partials` with the event's aggregate arguments added."""
        if self.no_arguments:
            return [add(partial) for add, partial in zip(self.adders, partials, strict=True)]
        args, window = self.args, self.window
        group = script_group(dims) if self.sees_group else dims  # what the per-event path passes
        return [
            add(partial, *[fn(event, meta, None, args, group, window) for fn in fns])
            for add, fns, partial in zip(self.adders, self.arguments, partials, strict=True)
        ]


def columnar_fold(rest: PipelineGraph, select: str, runner: SelectRunner) -> ColumnarFold | None:
    """The select as a `ColumnarFold`: aggregates `count()`, `min`, `max`, `first`, `last` of one
    argument each, a window time (if any) that is one plain expression."""
    spec = rest.nodes[select].spec
    windows = runner.windows
    assert isinstance(spec, SelectSpec) and windows is not None
    aggregates = []
    for call in windows.select.aggregates:
        kind = KINDS.get(call.cls)
        if (
            kind is None
            or len(call.args) != (0 if kind == "count" else 1)
            or len(call.arg_nodes) != len(call.args)
        ):
            return None
        arg = SourceExpr(spec.target.source, ast=call.arg_nodes[0]) if call.args else None
        aggregates.append(ColumnAggregate(kind, arg))
    script = spec.windows[0].script
    time = None
    if script is not None:
        if windows.script_values[0] is None:
            return None
        time = SourceExpr(script.source, ast=script.ast.exprs[0])
    group = spec.group_by.expr if spec.group_by is not None else None
    counts_only = all(a.kind == "count" for a in aggregates)
    steps = counts_only and closes_without_event(spec)  # a later step's partials are its count
    return ColumnarFold(spec.where, group, time, tuple(aggregates), steps=steps)


def _rebuilt(traced: Traced, heads: dict[int, Segment], folded: set[int]) -> tuple[Traced, pa.Array]:
    """The rows left after folding, each head with its encoded segment. A segment that cannot
    be encoded gives its events back as ordinary rows, right after its head."""
    kept: list[int] = []
    partials: list[bytes | None] = []
    for index in range(len(traced.ports)):
        if index in folded:
            continue
        segment = heads.get(index)
        if segment is None:
            kept.append(index)
            partials.append(None)
            continue
        try:
            encoded = segment.encode()
        except TypeError:  # e.g. a string orjson refuses: the events go as they are
            kept += [index, *segment.members]
            partials += [None] * (1 + len(segment.members))
            continue
        kept.append(index)
        partials.append(encoded)
    rows = Traced(
        [traced.ports[i] for i in kept],
        [traced.values[i] for i in kept],
        [traced.metas[i] for i in kept],
        [traced.sources[i] for i in kept],
        [traced.items[i] for i in kept],
    )
    return rows, pa.array(partials, pa.binary())


# -- the stateful side ------------------------------------------------------------------------------


# Closes a group's window on a folded step: (group key, window time, ingest time, metadata).
StepClose = Callable[[Any, int, int, dict[str, Any]], None]


def merge_partials(
    windows: Windows,
    events: pa.Table,
    plain: Callable[[pa.Table], None],
    partials: pa.Array,
    close: StepClose | None = None,
) -> None:
    """Run `events` (arrival order) through the executor holding `windows`: stretches of ordinary
    events through `plain`, each head as described in the module docstring, and the later steps
    of a segment (see `StepsLeft`) through `close`, in the place their events had.

    The heads' segments are decoded in one call, and a head before its window's end costs a few
    dict and attribute reads: most heads never reach the executor."""
    heads = pc.indices_nonzero(partials.is_valid()).to_pylist()
    segments = orjson.loads(b"[" + b",".join(partials.drop_null().to_pylist()) + b"]")
    waiting: list[tuple[int, int, StepsLeft]] = []  # (row before which it closes, its source row, steps)
    places = _Places(events)
    start = 0

    def run_to(stop: int) -> None:
        nonlocal start
        if start < stop:
            plain(events.slice(start, stop - start))
            start = stop

    def close_waiting(before: int) -> None:
        while waiting and waiting[0][0] <= before:
            position, _, steps = heapq.heappop(waiting)
            run_to(position)
            assert close is not None, "steps are only folded for a caller that closes them"
            steps.close_next(windows, close, events)
            steps.wait(windows, waiting)

    for index, (key, time, head, tail_count, tail, *later) in zip(heads, segments, strict=True):
        close_waiting(index)
        run_to(index)
        start = index + 1
        if type(key) is list:
            key = key[0].encode()
        group = windows.groups.get(key)
        frame = group.frames[0] if group is not None else None
        if frame is not None and frame.next_ns is not None and time < frame.next_ns:
            _absorb(frame, head, 1)  # before the window's end: the head only adds to it
            if tail_count:
                _absorb(frame, tail, tail_count)
        else:
            plain(events.slice(index, 1))  # the head as the event it is
            group = windows.groups.get(key)
            if tail_count:
                _fold_tail(windows, group, tail, tail_count)
        if later:
            if group is None:  # turned away by `max_groups`: so is every later step
                windows.dropped += sum(later[1])
            else:
                StepsLeft(key, index, places.after(index), *later).wait(windows, waiting)
    close_waiting(events.num_rows)
    run_to(events.num_rows)


class StepsLeft:
    """A segment's steps after its head: the rising window times of its group's events within one
    run of equal ingest times, each with the count of events from it to the next step. A step
    before the window's end only adds its count; the first one at or after it closes the window
    (`close`, as its event would, in its event's place), then adds its count to the new window.
    Only count-only selects fold steps (on columns), so a run of steps' partials is its count.
    `places[k]`: how many of the batch's rows left after folding come before step k's event
    (`PLACE_COLUMN`); `rows[k]`: that event's row among the prefix's outputs (orders steps of
    several segments waiting before the same row)."""

    __slots__ = ("key", "head", "after", "times", "counts", "places", "rows", "next")

    def __init__(
        self,
        key: Any,
        head: int,
        after: Callable[[int], int],
        times: list[int],
        counts: list[int],
        places: list[int],
        rows: list[int],
    ) -> None:
        self.key, self.head, self.after = key, head, after
        self.times, self.counts, self.places, self.rows = times, counts, places, rows
        self.next = 0

    def wait(self, windows: Windows, waiting: list[tuple[int, int, StepsLeft]]) -> None:
        """Add the steps before the window's end; queue the step that reaches it, if any."""
        frame = windows.groups[self.key].frames[0]
        end = frame.next_ns
        first = self.next
        reaching = bisect.bisect_left(self.times, end, first) if end is not None else first
        if reaching > first:
            added = sum(self.counts[first:reaching])
            _absorb(frame, [added] * len(frame.aggs), added)
        self.next = reaching
        if reaching < len(self.times):
            position = self.after(self.places[reaching])
            heapq.heappush(waiting, (position, self.rows[reaching], self))

    def close_next(self, windows: Windows, close: StepClose, events: pa.Table) -> None:
        """The waiting step: its clock moves (the window closes), then its events are added."""
        step = self.next
        meta = events.column("meta")[self.head].as_py()
        now = events.column("ingest_ns")[self.head].as_py()
        close(self.key, self.times[step], now, orjson.loads(meta) if meta else {})
        count = self.counts[step]
        _absorb(windows.groups[self.key].frames[0], [count] * len(windows.select.aggregates), count)
        self.next = step + 1

    def __lt__(self, other: StepsLeft) -> bool:  # ties never reach it: (position, row) is unique
        return self.head < other.head


class _Places:
    """Where a step's event falls among the call's rows: right after the head, its envelope's rows
    follow in their places' order (a segment lies in one run of equal ingest times, which
    `arrival_order` keeps together), so a step goes before the first of them at a later place."""

    def __init__(self, events: pa.Table) -> None:
        self.places = events.column(PLACE_COLUMN).to_numpy()
        envelopes = events.column(ENVELOPE_COLUMN).to_numpy()
        self.ends = np.append(np.flatnonzero(envelopes[1:] != envelopes[:-1]) + 1, len(envelopes))

    def after(self, head: int) -> Callable[[int], int]:
        """The row before which an event of `head`'s envelope at a given place goes."""
        end = int(self.ends[np.searchsorted(self.ends, head, side="right")])
        following = self.places[head + 1 : end]
        return lambda place: head + 1 + int(np.searchsorted(following, place))


def _fold_tail(windows: Windows, group: Group | None, tail: list[Any], tail_count: int) -> None:
    if group is None:  # `max_groups` turned the head away, and so each of the others
        windows.dropped += tail_count
    else:
        _absorb(group.frames[0], tail, tail_count)


def _absorb(frame: Frame, partials: list[Any], count: int) -> None:
    for aggregate, partial in zip(frame.aggs, partials):  # noqa: B905 - one partial per aggregate
        aggregate.absorb(partial)
    frame.n += count
