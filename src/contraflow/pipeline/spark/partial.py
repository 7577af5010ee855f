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
After a columnar prefix (no items to read) only count-only selects fold, on
the prefix's columns (`contraflow.pipeline.spark.columnar_fold`), batch by
batch where the columns answer every row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contraflow.lang.graph import PipelineGraph, SelectSpec, SourceExpr
from contraflow.lang.script.aggr import Count
from contraflow.pipeline.base import Context
from contraflow.pipeline.columnar import ColumnarTraced
from contraflow.pipeline.executor import Traced
from contraflow.pipeline.item import opened
from contraflow.pipeline.select import SelectRunner
from contraflow.pipeline.spark.columnar_fold import ColumnarFold
from contraflow.pipeline.windows import Frame, Group, Windows, window_group_key

# The envelope column holding a head's segment (JSON, see `Segment.encode`); null for an ordinary event.
PARTIAL_COLUMN = "partial"
PARTIAL_FIELD = pa.field(PARTIAL_COLUMN, pa.binary())

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
            return folded if folded is not None else (traced, pa.nulls(len(traced.ports), pa.binary()))
        if len(traced.items) != len(traced.ports):
            return traced, pa.nulls(len(traced.ports), pa.binary())
        return self.collapse_items(traced, ingest.to_pylist())

    def collapse_items(self, traced: Traced, ingest: list[int]) -> tuple[Traced, pa.Array]:
        """The fold event by event, with the select's own compiled code."""
        heads: dict[int, Segment] = {}
        folded: set[int] = set()  # rows folded into a segment, or dropped by `where`
        fold = _Folder(self._runner)
        open_segments: dict[Any, Segment] = {}
        for index, (port, item, source) in enumerate(
            zip(traced.ports, traced.items, traced.sources, strict=True)
        ):
            if port != self.port:
                continue
            now = ingest[source]
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
        return _rebuilt(traced, heads, folded)


class _Folder:
    """One event's step of `PartialAggregation.collapse`, with the select's own compiled code."""

    def __init__(self, runner: SelectRunner) -> None:
        windows = runner.windows
        assert windows is not None
        self.windows: Windows = windows
        self.where = runner.where_fn
        self.group_expr = runner.group_expr
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
        return [
            add(partial, *[fn(event, meta, None, args, dims, window) for fn in fns])
            for add, fns, partial in zip(self.adders, self.arguments, partials, strict=True)
        ]


def columnar_fold(rest: PipelineGraph, select: str, runner: SelectRunner) -> ColumnarFold | None:
    """The select as a `ColumnarFold`: only count aggregates, a window time (if any) that is one
    plain expression."""
    spec = rest.nodes[select].spec
    windows = runner.windows
    assert isinstance(spec, SelectSpec) and windows is not None
    calls = windows.select.aggregates
    if not all(call.cls is Count and not call.args for call in calls):
        return None
    script = spec.windows[0].script
    time = None
    if script is not None:
        if windows.script_values[0] is None:
            return None
        time = SourceExpr(script.source, ast=script.ast.exprs[0])
    group = spec.group_by.expr if spec.group_by is not None else None
    return ColumnarFold(spec.where, group, time, len(calls))


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


def merge_partials(
    windows: Windows, events: pa.Table, plain: Callable[[pa.Table], None], partials: pa.Array
) -> None:
    """Run `events` (arrival order) through the executor holding `windows`: stretches of ordinary
    events through `plain`, each head as described in the module docstring.

    The heads' segments are decoded in one call, and a head before its window's end costs a few
    dict and attribute reads: most heads never reach the executor."""
    heads = pc.indices_nonzero(partials.is_valid()).to_pylist()
    segments = orjson.loads(b"[" + b",".join(partials.drop_null().to_pylist()) + b"]")
    start = 0
    for index, (key, time, head, tail_count, tail) in zip(heads, segments, strict=True):
        if start < index:
            plain(events.slice(start, index - start))
        start = index + 1
        if type(key) is list:
            key = key[0].encode()
        group = windows.groups.get(key)
        if group is not None:
            frame = group.frames[0]
            end = frame.next_ns
            if end is not None and time < end:  # before the window's end: the head only adds to it
                _absorb(frame, head, 1)
                if tail_count:
                    _absorb(frame, tail, tail_count)
                continue
        plain(events.slice(index, 1))  # the head as the event it is
        if tail_count:
            _fold_tail(windows, windows.groups.get(key), tail, tail_count)
    if start < events.num_rows:
        plain(events.slice(start))


def _fold_tail(windows: Windows, group: Group | None, tail: list[Any], tail_count: int) -> None:
    if group is None:  # `max_groups` turned the head away, and so each of the others
        windows.dropped += tail_count
    else:
        _absorb(group.frames[0], tail, tail_count)


def _absorb(frame: Frame, partials: list[Any], count: int) -> None:
    for aggregate, partial in zip(frame.aggs, partials):  # noqa: B905 - one partial per aggregate
        aggregate.absorb(partial)
    frame.n += count
