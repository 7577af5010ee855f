"""A set of byte ranges: which parts of a segment file have passed their CRC check.

Reads check each batch once per process (at append, in a recovery scan, or on
the first read that reaches it) and remember the bytes here, so serving the
same data again costs a bisect, not a CRC pass.
"""

from __future__ import annotations

import bisect


class RangeSet:
    """Disjoint, sorted half-open ranges [start, end); adjacent ranges merge."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def covers(self, start: int, end: int) -> bool:
        """True if [start, end) lies inside one stored range."""
        i = bisect.bisect_right(self._starts, start) - 1
        return i >= 0 and self._ends[i] >= end

    def add(self, start: int, end: int) -> None:
        if end <= start:
            return
        if self._ends and self._ends[-1] == start:  # the common case: growing the tail
            self._ends[-1] = end
            return
        lo = bisect.bisect_left(self._ends, start)
        hi = bisect.bisect_right(self._starts, end)
        if lo < hi:
            start = min(start, self._starts[lo])
            end = max(end, self._ends[hi - 1])
        self._starts[lo:hi] = [start]
        self._ends[lo:hi] = [end]

    def first_gap(self, size: int, start: int = 0) -> int | None:
        """The first position in [start, size) no range covers; None if all of it is covered."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i >= 0 and self._ends[i] > start:
            start = self._ends[i]  # ranges never touch: the end of one is outside every other
        return start if start < size else None

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends, strict=True))

    def clip(self, size: int) -> None:
        """Forget everything at or after byte `size` (the file was cut there)."""
        i = bisect.bisect_left(self._starts, size)
        del self._starts[i:], self._ends[i:]
        if self._ends and self._ends[-1] > size:
            self._ends[-1] = size

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()
