"""The partial aggregates of a fold on columns (`columnar_fold`), as `Segment.encode` writes them.

Each aggregate a select folds after a columnar prefix gives, per segment, the
JSON text of its head's partial and of the partial of the rest of the segment
(`lang/script/aggr.py`: `add_to_partial` from `EMPTY_PARTIAL`), built from the
text of its argument on every row (`ColumnarTraced.text_column`):

- `count`: `1` and the count of the others;
- `min` / `max`: the value itself, and the text of the extreme among the
  others (the first of equal values, as `Min.replaces` is strict; null for
  none). Only integer texts fold: within one batch the argument is one int64
  column, so comparing the numbers is exact; any other row stays ordinary
  (floats, bools, strings: the executor reports or takes them);
- `first` / `last`: `[value]` and `[the first / last other's value]` (null for
  none). Scalars only, and not `null` (a NaN or infinite literal also reads
  `null`, which `_exact_scalar` refuses): records and arrays stay ordinary.

No text is formatted here: every partial is a row's argument text, so it is
byte for byte what orjson writes for the per-event fold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contraflow.lang.graph import SourceExpr
from contraflow.lang.script.aggr import Count, First, Last, Max, Min

# The aggregates a fold on columns carries, by class (subclasses do not count: `is`, not isinstance).
KINDS = {Count: "count", Min: "min", Max: "max", First: "first", Last: "last"}
_INTEGER = r"^-?[0-9]+$"
# The JSON scalars a first/last partial carries: strings, bools, numbers (finite: orjson writes no
# other).
_SCALAR = r'^("|true$|false$|-?[0-9])'


@dataclass(frozen=True)
class ColumnAggregate:
    """One aggregate of the select: its kind (`KINDS`) and its argument (None for `count()`)."""

    kind: str
    arg: SourceExpr | None

    def foldable(self, text: pa.Array) -> pa.Array:
        """Rows whose argument a partial carries exactly (the others stay ordinary events)."""
        if self.kind in ("min", "max"):
            return pc.match_substring_regex(text, _INTEGER)
        return pc.match_substring_regex(text, _SCALAR)

    def numbers(self, text: pa.Array, foldable: pa.Array) -> np.ndarray | None:
        """The argument as integers where foldable (min/max only); None beyond int64."""
        if self.kind not in ("min", "max"):
            return None
        try:
            found = pc.if_else(foldable, text, "0").cast(pa.int64())
        except pa.ArrowInvalid:
            return None
        return np.asarray(found.to_numpy(zero_copy_only=False), dtype=np.int64)


@dataclass
class Members:
    """The rows folded into segments (`rows`, ascending) and the segment each one is in
    (`owners`, numbered in row order of the heads); `segments` in all."""

    rows: np.ndarray
    owners: np.ndarray
    segments: int

    def first(self) -> np.ndarray:
        """Each segment's first member row (-1: none)."""
        return self._picked(self.owners, self.rows)

    def last(self) -> np.ndarray:
        """Each segment's last member row (-1: none)."""
        return self._picked(self.owners[::-1], self.rows[::-1])

    def extreme(self, numbers: np.ndarray, largest: bool) -> np.ndarray:
        """Each segment's member row with the least (or greatest) number, the first of equal ones."""
        values = numbers[self.rows]
        if largest:  # greatest value first, then the earliest row
            order = np.lexsort((self.rows, _descending_rank(values), self.owners))
        else:
            order = np.lexsort((self.rows, values, self.owners))
        return self._picked(self.owners[order], self.rows[order])

    def _picked(self, owners: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The row of each segment's first entry in `owners` (-1 for a segment without one)."""
        found = np.full(self.segments, -1, dtype=np.int64)
        segments, first = np.unique(owners, return_index=True)
        found[segments] = rows[first]
        return found


def _descending_rank(values: np.ndarray) -> np.ndarray:
    """A key that sorts `values` from the greatest (no negation: int64's least value has none)."""
    distinct, rank = np.unique(values, return_inverse=True)
    return len(distinct) - 1 - rank


def partial_texts(
    aggregate: ColumnAggregate,
    text: pa.Array | None,
    numbers: np.ndarray | None,
    heads: np.ndarray,
    counts: pa.Array,
    members: Members,
) -> tuple[Any, Any]:
    """The head's partial and the other members' partial of each segment, as JSON text (an Arrow
    string array or one string for all)."""
    if aggregate.kind == "count":
        return "1", counts
    assert text is not None
    head = text.take(pa.array(heads))
    if aggregate.kind == "min" or aggregate.kind == "max":
        assert numbers is not None
        picked = members.extreme(numbers, largest=aggregate.kind == "max")
    else:
        picked = members.first() if aggregate.kind == "first" else members.last()
    some = pa.array(picked >= 0)
    tail = text.take(pa.array(np.maximum(picked, 0)))
    if aggregate.kind in ("first", "last"):
        head = pc.binary_join_element_wise("[", head, "]", "")
        tail = pc.binary_join_element_wise("[", tail, "]", "")
    return head, pc.if_else(some, tail, "null")
