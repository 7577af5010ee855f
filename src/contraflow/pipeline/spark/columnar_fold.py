"""Partial aggregation's fold computed on columns, after a prefix that ran columnar.

`contraflow.pipeline.spark.partial` folds event by event with the select's
compiled code; after a columnar prefix (`ColumnarTraced`) the same segments
come out of a few vectorized passes instead. Each output to the cut port is
classified from its columns (`ColumnarTraced.text_column`: the `where`, the
group value and the window time as JSON text): dropped by `where`, ordinary
(`where` not a boolean, a group value that is not a scalar, a window time
that is not a non-negative integer) or foldable. Then, per group, between
ordinary rows (an ordinary row ends every open segment) and within a stretch
of one ingest time, a segment's head is an event whose time exceeds every
earlier one of the stretch: exactly the rule `_Folder.step` applies one event
at a time (a head of time t takes the following events with time <= t; the
first later one with time > t heads the next), found with a running maximum.

Only selects whose aggregates are all `aggr::stats::count()` fold here (their
partials are counts, so a segment needs no argument values). Anything the
columns do not answer exactly (an output of the per-event executor, an
inexact row, an expression that does not lower) returns None: the caller then
folds the batch event by event, with identical results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from contraflow.lang.graph import SourceExpr
from contraflow.pipeline.columnar import ColumnarTraced

# A window time the window accepts: a non-negative integer's JSON text.
_NON_NEGATIVE_INT = r"^[0-9]+$"
# An ungrouped select's one group, as its text column.
_NO_GROUP = "null"


@dataclass(frozen=True)
class ColumnarFold:
    """The select's `where`, `group by` expression and window time expression (None: no `where`,
    ungrouped, ingest time) and how many count aggregates it has."""

    where: SourceExpr | None
    group: SourceExpr | None
    time: SourceExpr | None
    counts: int

    @property
    def reads(self) -> tuple[SourceExpr, ...]:
        """The expressions evaluated on the prefix's outputs (their fields must be parsed)."""
        return tuple(e for e in (self.where, self.group, self.time) if e is not None)

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
        columns = {"row": rows.cast(pa.int64()), "i": ingest.take(outputs.column("source").take(rows))}
        for name, expr in (("w", self.where), ("g", self.group), ("t", self.time)):
            if expr is not None:
                texts = traced.text_column(expr.ast)
                if texts is None:
                    return None
                texts = texts.take(rows)
                if texts.null_count:
                    return None
                columns[name] = texts
        frame = pl.DataFrame(columns)
        segments = self._segments(frame)
        if segments is None:
            return None
        heads, folded = segments
        return _rebuilt(traced, heads, folded, self.counts, self.group is not None)

    def _segments(self, frame: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray] | None:
        """The heads (row, group text, time, ingest, folded count) and the rows folded away."""
        where = pl.col("w") if self.where is not None else pl.lit("true")
        group = pl.col("g") if self.group is not None else pl.lit(_NO_GROUP)
        time_text = pl.col("t") if self.time is not None else pl.col("i").cast(pl.String)
        dropped = where == "false"
        ordinary = (
            ~where.is_in(["true", "false"])
            | group.str.starts_with("[")
            | group.str.starts_with("{")
            | ~time_text.str.contains(_NON_NEGATIVE_INT)
        )
        frame = frame.select(
            "row",
            "i",
            g=group,
            t=time_text.str.to_integer(strict=False) if self.time is not None else pl.col("i"),
            dropped=dropped & ~ordinary,
            ordinary=ordinary,
        )
        frame = frame.with_columns(epoch=pl.col("ordinary").cum_sum())
        candidates = frame.filter(~pl.col("ordinary") & ~pl.col("dropped"))
        if candidates.get_column("t").null_count():
            return None  # a time beyond int64: the per-event fold takes it
        stretch = ["g", "epoch", "run"]
        candidates = candidates.with_columns(
            run=(pl.col("i") != pl.col("i").shift(1)).fill_null(True).cum_sum().over("g", "epoch")
        ).with_columns(before=pl.col("t").cum_max().shift(1).over(stretch))
        candidates = candidates.with_columns(
            head=pl.col("before").is_null() | (pl.col("t") > pl.col("before"))
        ).with_columns(head_row=pl.when("head").then("row").otherwise(None).forward_fill().over(stretch))
        heads = candidates.group_by("head_row", maintain_order=True).agg(
            pl.col("g").first(), pl.col("t").first(), pl.col("i").first(), members=pl.len() - 1
        )
        folded = np.concatenate(
            [
                frame.filter("dropped").get_column("row").to_numpy(),
                candidates.filter(~pl.col("head")).get_column("row").to_numpy(),
            ]
        )
        return heads, folded


def _rebuilt(
    traced: ColumnarTraced, heads: pl.DataFrame, folded: np.ndarray, counts: int, grouped: bool
) -> tuple[ColumnarTraced, pa.Array]:
    """The rows left after folding (order kept), each head with its encoded segment: the bytes
    `Segment.encode` writes, `[key, time, head partials, members, tail partials]` (a key that is
    not one string travels as `[its group_key text]`, the ungrouped group as null)."""
    outputs = traced.outputs
    assert outputs is not None
    count = outputs.num_rows
    keep = np.ones(count, dtype=bool)
    keep[folded] = False
    ones = "[" + ",".join(["1"] * counts) + "]"
    members = pl.col("members").cast(pl.String)
    tail = pl.concat_str([pl.lit("["), *_joined([members] * counts), pl.lit("]")]) if counts else pl.lit("[]")
    group = pl.col("g")
    key = (
        pl.when(group.str.starts_with('"'))
        .then(group)
        .otherwise(pl.concat_str([pl.lit('["['), group, pl.lit(']"]')]))
        if grouped
        else pl.lit(_NO_GROUP)
    )
    encoded = heads.select(
        row=pl.col("head_row"),
        partial=pl.concat_str(
            [pl.lit("["), key, pl.lit(","), pl.col("t").cast(pl.String), pl.lit("," + ones + ","), members]
            + [pl.lit(","), tail, pl.lit("]")]
        ).cast(pl.Binary),
    )
    kept = np.flatnonzero(keep)
    # Each kept row's index into `encoded` (heads are kept, in row order), -1 (null) for the others.
    which = np.full(len(kept), -1, dtype=np.int64)
    which[np.searchsorted(kept, encoded.get_column("row").to_numpy())] = np.arange(encoded.height)
    segments = encoded.get_column("partial").to_arrow().take(pa.array(which, mask=which < 0))
    return _with_outputs(traced, outputs.take(pa.array(kept))), segments.cast(pa.binary())


def _joined(parts: list[Any]) -> list[Any]:
    """`parts` with a comma between each two."""
    out: list[Any] = []
    for index, part in enumerate(parts):
        out += [pl.lit(","), part] if index else [part]
    return out


def _with_outputs(traced: ColumnarTraced, outputs: pa.RecordBatch) -> ColumnarTraced:
    return ColumnarTraced(
        outputs.column("port").to_pylist(),
        outputs.column("value").to_pylist(),
        outputs.column("meta").to_pylist(),
        outputs.column("source").to_pylist(),
        outputs=outputs,
        parsed=traced.parsed,
        columnar_rows=traced.columnar_rows,
        evaluator=traced.evaluator,
        routes=traced.routes,
    )
