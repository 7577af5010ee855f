"""Partial aggregation's fold computed on columns, after a prefix that ran columnar.

`contraflow.pipeline.spark.partial` folds event by event with the select's
compiled code; after a columnar prefix (`ColumnarTraced`) the same segments
come out of a few vectorized passes instead. Each output to the cut port is
classified from its columns (`ColumnarTraced.text_column`: the `where` and
the group value as JSON text; the window time as a number, as it is from an
integer field, `ColumnarTraced.int_column`, else from its text): dropped by
`where`, ordinary (`where` not a boolean, a group value that is not a scalar,
a window time that is not a non-negative integer) or foldable. Then, per
group, between ordinary rows (an ordinary row ends every open segment) and
within a stretch of one ingest time, a segment's head is an event whose time
exceeds every earlier one of the stretch: exactly the rule `_Folder.step`
applies one event at a time (a head of time t takes the following events with
time <= t; the first later one with time > t heads the next), found with a
running maximum: numpy, a stable sort by group (epochs never fall in row
order), each stretch's times offset above all earlier stretches', one
`maximum.accumulate` (no per-row Python; polars' window expressions cost more
in fixed overhead per call than the whole fold on a read task's few thousand
rows).

With `steps` (`partial.closes_without_event`) a segment is the whole stretch
of a group (also ended by a change of metadata): its first head crosses, the
later heads travel in its text as steps (`_LaterSteps`: times, counts, where
each falls among the rows left, its output row).

The aggregates folded here are `count()`, `min`, `max`, `first` and `last`
(`columnar_partials`: their partials are argument texts of rows; a row whose
argument a partial cannot carry exactly stays ordinary). Anything the
columns do not answer exactly (an output of the per-event executor, an
inexact row, an expression that does not lower) returns None: the caller then
sends the batch unfolded (every event ordinary), with identical results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contraflow.lang.graph import SourceExpr
from contraflow.pipeline.columnar import ColumnarTraced
from contraflow.pipeline.spark.columnar_partials import ColumnAggregate, Members, partial_texts

# A window time the window accepts: a non-negative integer's JSON text.
_NON_NEGATIVE_INT = r"^[0-9]+$"
# An ungrouped select's one group, as its text column.
_NO_GROUP = "null"


@dataclass(frozen=True)
class ColumnarFold:
    """The select's `where`, `group by` expression and window time expression (None: no `where`,
    ungrouped, ingest time) and its aggregates."""

    where: SourceExpr | None
    group: SourceExpr | None
    time: SourceExpr | None
    aggregates: tuple[ColumnAggregate, ...]
    # Whether a segment takes its group's later steps too (`partial.closes_without_event`).
    steps: bool = False

    @property
    def reads(self) -> tuple[SourceExpr, ...]:
        """The expressions evaluated on the prefix's outputs (their fields must be parsed)."""
        exprs = (self.where, self.group, self.time, *(a.arg for a in self.aggregates))
        return tuple(e for e in exprs if e is not None)

    def fold(
        self, traced: ColumnarTraced, port: str, ingest: pa.Array
    ) -> tuple[ColumnarTraced, pa.Array] | None:
        """The outputs with each segment's events replaced by its head, and each row's encoded
        segment (null for an ordinary row); None when the columns do not answer every row."""
        outputs = traced.outputs
        assert outputs is not None
        rows = pc.indices_nonzero(pc.equal(outputs.column("port"), port))
        if not len(rows):
            return traced, pa.nulls(outputs.num_rows, pa.binary())
        texts: dict[str, pa.Array] = {}
        for name, expr in (("where", self.where), ("group", self.group)):
            if expr is not None:
                column = traced.text_column(expr.ast)
                if column is None:
                    return None
                texts[name] = column.take(rows)
                if texts[name].null_count:
                    return None
        times = _window_times(traced, self.time.ast, rows) if self.time is not None else None
        if self.time is not None and times is None:
            return None
        arguments: list[pa.Array | None] = []
        for aggregate in self.aggregates:
            column = traced.text_column(aggregate.arg.ast) if aggregate.arg is not None else None
            if aggregate.arg is not None and (column is None or column.take(rows).null_count):
                return None
            arguments.append(column.take(rows) if column is not None else None)
        each_ingest = ingest.take(outputs.column("source"))
        meta = outputs.column("meta").take(rows) if self.steps else None
        rows_of = _Rows.classify(
            texts, times, each_ingest.take(rows), _ingest_runs(each_ingest).take(rows), meta
        )
        numbers = rows_of.with_arguments(self.aggregates, arguments) if rows_of is not None else None
        if rows_of is None or numbers is None:
            return None
        found = rows_of.segments(self.steps)
        if found is None:
            return None
        row_numbers = rows.to_numpy().astype(np.int64)
        folded = np.concatenate([row_numbers[rows_of.dropped], row_numbers[found.members]])
        group = texts.get("group")
        keys = group.take(pa.array(found.heads)) if group is not None else None
        heads = row_numbers[found.heads]
        counts = pa.array(found.counts).cast(pa.string())
        members = found.members_of()
        partials = [
            partial_texts(aggregate, argument, number, found.heads, counts, members)
            for aggregate, argument, number in zip(self.aggregates, arguments, numbers, strict=True)
        ]
        texts_of = found.texts(keys, counts, partials)
        if found.later is not None:
            texts_of = found.later.appended(texts_of, row_numbers, folded, outputs.num_rows)
        return _rebuilt(traced, heads, texts_of, folded)


@dataclass
class _Segments:
    """Positions among the cut port's rows: each segment's head (ascending) with its time and
    the count of the others, and those others (folded into it)."""

    heads: np.ndarray
    times: np.ndarray
    counts: np.ndarray
    members: np.ndarray
    later: _LaterSteps | None = None
    # The segment (numbered as `heads`) each of `members` is in; None with later steps (counts only).
    owners: np.ndarray | None = None

    def members_of(self) -> Members:
        owners = self.owners if self.owners is not None else np.zeros(len(self.members), dtype=np.int64)
        return Members(self.members, owners, len(self.heads))

    def texts(self, keys: pa.Array | None, counts: pa.Array, partials: list[tuple[Any, Any]]) -> pa.Array:
        """Each head's segment as `Segment.encode` writes it: `[key, time, head partials, members,
        tail partials]` (a key that is not one string travels as `[its group_key text]`, the
        ungrouped group as null); `partials`: each aggregate's head and tail texts."""
        if keys is None:
            key: Any = pa.repeat(pa.scalar(_NO_GROUP), len(self.heads))
        else:
            wrapped = pc.binary_join_element_wise('["[', keys, ']"]', "")
            key = pc.if_else(pc.starts_with(keys, '"'), keys, wrapped)
        times = pa.array(self.times).cast(pa.string())
        heads = _joined([head for head, _ in partials])
        tails = _joined([tail for _, tail in partials])
        parts = ["[", key, ",", times, ",[", *heads, "],", counts, ",[", *tails, "]]"]
        return pc.binary_join_element_wise(*parts, "").cast(pa.binary())


@dataclass
class _Rows:
    """The cut port's rows as the fold classifies them (numpy arrays, one entry per row)."""

    dropped: np.ndarray  # `where` is false
    ordinary: np.ndarray  # must stay an ordinary event
    group: np.ndarray  # a number per distinct group text
    time: np.ndarray
    run: np.ndarray  # the run of equal ingest times among all outputs the row is in
    meta: np.ndarray | None  # a number per distinct metadata (when a segment takes later steps)

    @classmethod
    def classify(
        cls,
        texts: dict[str, pa.Array],
        times: pa.Array | None,
        ingest: pa.Array,
        runs: pa.Array,
        meta: pa.Array | None,
    ) -> _Rows | None:
        """`texts`: the `where` and group texts; `times`: the window times (None: ingest time), null
        where one is not a non-negative integer."""
        count = len(ingest)
        where = texts.get("where")
        keep = pc.equal(where, "true") if where is not None else pa.repeat(True, count)
        dropped = pc.equal(where, "false") if where is not None else pa.repeat(False, count)
        ordinary = pc.invert(pc.or_(keep, dropped))
        group = texts.get("group")
        if group is not None:
            scalar = pc.invert(pc.or_(pc.starts_with(group, "["), pc.starts_with(group, "{")))
            ordinary = pc.or_(ordinary, pc.and_(keep, pc.invert(scalar)))
            numbers = pc.dictionary_encode(group).indices.to_numpy().astype(np.int64)
        else:
            numbers = np.zeros(count, dtype=np.int64)
        if times is not None:
            ordinary = pc.or_(ordinary, pc.and_(keep, times.is_null()))
            times = times.fill_null(0).to_numpy()
        else:
            times = ingest.to_numpy()
        return cls(
            np.asarray(dropped.to_numpy(zero_copy_only=False), dtype=bool),
            np.asarray(ordinary.to_numpy(zero_copy_only=False), dtype=bool),
            numbers,
            np.asarray(times, dtype=np.int64),
            np.asarray(runs.to_numpy(), dtype=np.int64),
            _numbered(meta) if meta is not None else None,
        )

    def with_arguments(
        self, aggregates: tuple[ColumnAggregate, ...], arguments: list[pa.Array | None]
    ) -> list[np.ndarray | None] | None:
        """Make the kept rows whose aggregate arguments a partial cannot carry ordinary; each
        aggregate's argument as numbers (min/max), None when they do not fit int64."""
        numbers: list[np.ndarray | None] = []
        for aggregate, text in zip(aggregates, arguments, strict=True):
            if text is None:
                numbers.append(None)
                continue
            foldable = aggregate.foldable(text)
            exact = np.asarray(foldable.to_numpy(zero_copy_only=False), dtype=bool)
            self.ordinary |= ~exact & ~self.dropped
            number = aggregate.numbers(text, foldable)
            if number is None and aggregate.kind in ("min", "max"):
                return None
            numbers.append(number)
        return numbers

    def segments(self, steps: bool) -> _Segments | None:
        """The segments (see the module docstring); None when the times span too much to offset.
        With `steps` a segment is a whole stretch: its first head's, with the later heads (steps)
        in `later`."""
        # An ordinary row ends every open segment, and so does a change of ingest time.
        epoch = np.cumsum(self.ordinary) + self.run
        candidates = np.flatnonzero(~self.ordinary & ~self.dropped)
        if not len(candidates):
            return _Segments(candidates, candidates, candidates, candidates)
        group, times = self.group[candidates], self.time[candidates]
        # Each (group, epoch) in row order; with steps, a change of metadata starts a new stretch
        # (a later step's close gives its outputs the head's metadata). Epochs never fall in row
        # order, so a stable sort by group alone orders them (a radix sort on small numbers).
        order = np.argsort(group.astype(_narrowest(int(group.max()))), kind="stable")
        group, epochs, times = group[order], epoch[candidates][order], times[order]
        starts = np.ones(len(order), dtype=bool)
        starts[1:] = (group[1:] != group[:-1]) | (epochs[1:] != epochs[:-1])
        if steps and self.meta is not None:
            meta = self.meta[candidates][order]
            starts[1:] |= meta[1:] != meta[:-1]
        stretch = np.cumsum(starts) - 1
        # A running maximum per stretch: every stretch's times offset above all earlier ones.
        low, span = int(times.min()), int(times.max()) - int(times.min()) + 1
        if span * (int(stretch[-1]) + 1) >= 2**62:
            return None
        offset = (times - low) + stretch * span
        before = np.maximum.accumulate(offset)
        head = starts.copy()
        head[1:] |= offset[1:] > before[:-1]
        others = np.bincount(np.cumsum(head) - 1) - 1  # per step, in sorted order
        positions = candidates[order]
        if not steps:
            by_row = np.argsort(positions[head])
            numbered = np.empty_like(by_row)
            numbered[by_row] = np.arange(len(by_row))  # a segment's number in row order of the heads
            owners = numbered[np.cumsum(head) - 1][~head]
            members = positions[~head]
            in_rows = np.argsort(members)
            return _Segments(
                positions[head][by_row],
                times[head][by_row],
                others[by_row],
                members[in_rows],
                owners=owners[in_rows],
            )
        # Segments are stretches: their first step is the head, the others cross as `later`.
        first = starts[head]  # per step: whether it begins its stretch
        by_row = np.argsort(positions[starts])
        later = _LaterSteps.of(
            np.argsort(by_row)[stretch[head][~first]],
            positions[head][~first],
            times[head][~first],
            others[~first] + 1,
            len(by_row),
        )
        return _Segments(
            positions[starts][by_row],
            times[starts][by_row],
            others[first][by_row],
            _ascending(positions[~starts], len(self.ordinary)),
            later,
        )


@dataclass
class _LaterSteps:
    """The steps after each segment's head (see `partial.StepsLeft`), sorted by segment (numbered
    in row order of their heads), then row: where each segment's run of them starts (`offsets`),
    their rows among the cut port's rows, window times and event counts."""

    offsets: np.ndarray
    rows: np.ndarray
    times: np.ndarray
    counts: np.ndarray

    @classmethod
    def of(
        cls, segment: np.ndarray, rows: np.ndarray, times: np.ndarray, counts: np.ndarray, segments: int
    ) -> _LaterSteps:
        order = np.argsort(segment, kind="stable")  # in row order within a segment already
        offsets = np.zeros(segments + 1, dtype=np.int32)
        np.cumsum(np.bincount(segment, minlength=segments), out=offsets[1:])
        return cls(offsets, rows[order], times[order], counts[order])

    def appended(self, texts: pa.Array, row_numbers: np.ndarray, folded: np.ndarray, total: int) -> pa.Array:
        """Each segment's text with its later steps, if it has any: `[..., [times], [counts],
        [places], [rows]]`, a step's place being how many of the rows left come before it, its row
        its output row. One `orjson` call per such segment (a few per group and batch), on numpy
        slices: casting every step's numbers to text in Arrow cost more."""
        keep = np.ones(total, dtype=bool)
        keep[folded] = False
        rows = row_numbers[self.rows]
        columns = [self.times, self.counts, np.searchsorted(np.flatnonzero(keep), rows), rows]
        found: list[bytes] = texts.to_pylist()
        for segment in np.flatnonzero(np.diff(self.offsets)):
            start, end = self.offsets[segment], self.offsets[segment + 1]
            lists = orjson.dumps([c[start:end] for c in columns], option=orjson.OPT_SERIALIZE_NUMPY)
            found[segment] = found[segment][:-1] + b"," + lists[1:]
        return pa.array(found, pa.binary())


def _window_times(traced: ColumnarTraced, expr: Any, rows: pa.Array) -> pa.Array | None:
    """The window time of each of `rows` (null where the window refuses it: not a non-negative
    integer); None when the columns do not answer every row. An integer field is read as it is;
    any other expression through its JSON text."""
    numbers = traced.int_column(expr)
    if numbers is not None:
        numbers = numbers.take(rows)
        if not numbers.null_count:
            return pc.if_else(pc.greater_equal(numbers, 0), numbers, None)
    texts = traced.text_column(expr)
    if texts is None:
        return None
    texts = texts.take(rows)
    if texts.null_count:
        return None
    valid = pc.match_substring_regex(texts, _NON_NEGATIVE_INT)
    try:
        return pc.if_else(valid, texts, None).cast(pa.int64())
    except pa.ArrowInvalid:  # beyond int64: the per-event fold takes it
        return None


def _narrowest(largest: int) -> type[np.unsignedinteger[Any]]:
    """The smallest unsigned type holding 0..largest (numpy sorts 16-bit keys stably by radix)."""
    return np.uint16 if largest < 2**16 else np.uint32 if largest < 2**32 else np.uint64


def _ascending(rows: np.ndarray, count: int) -> np.ndarray:
    """Distinct row numbers below `count`, sorted: marked in a mask, no comparison sort."""
    marked = np.zeros(count, dtype=bool)
    marked[rows] = True
    return np.flatnonzero(marked)


def _numbered(column: pa.Array) -> np.ndarray:
    """A number per distinct value (null included) of `column`."""
    encoded = pc.dictionary_encode(column, null_encoding="encode")
    return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)


def _ingest_runs(ingest: pa.Array) -> pa.Array:
    """Each row's run of equal ingest times in row order (a segment stays in one: equal-ingest runs
    of one partition stay contiguous in `arrival_order`)."""
    values = np.asarray(ingest.to_numpy(zero_copy_only=False), dtype=np.int64)
    changes = np.zeros(len(values), dtype=np.int64)
    changes[1:] = values[1:] != values[:-1]
    return pa.array(np.cumsum(changes))


def _rebuilt(
    traced: ColumnarTraced, heads: np.ndarray, segments: pa.Array, folded: np.ndarray
) -> tuple[ColumnarTraced, pa.Array]:
    """The rows left after folding (order kept), each head (output row numbers, ascending) with
    its encoded segment, null for the other rows."""
    outputs = traced.outputs
    assert outputs is not None
    keep = np.ones(outputs.num_rows, dtype=bool)
    keep[folded] = False
    kept = np.flatnonzero(keep)
    # Each kept row's index into `segments` (heads are kept, in row order), -1 (null) for the others.
    which = np.full(len(kept), -1, dtype=np.int64)
    which[np.searchsorted(kept, heads)] = np.arange(len(heads))
    found = segments.take(pa.array(which, mask=which < 0))
    return traced.with_outputs(outputs.take(pa.array(kept))), found


def _joined(parts: list[Any]) -> list[Any]:
    """`parts` with a comma between each two."""
    out: list[Any] = []
    for index, part in enumerate(parts):
        out += [",", part] if index else [part]
    return out
