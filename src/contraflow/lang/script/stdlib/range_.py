"""`std::range::`: `range(start, end)` (the integers from start to end, end excluded) and `contains(r, n)`."""

from __future__ import annotations

from typing import Any

from contraflow.lang.script import values
from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail

MAX_RANGE = 1_000_000  # an array this long is surely a mistake in a per-event script


@tremor_fn("range::range")
def range_(start: Any, end: Any) -> list[int]:
    a, b = want(start, int, "range::range", "start"), want(end, int, "range::range", "end")
    if b - a > MAX_RANGE:
        fail(f"range::range: {b - a} elements is more than {MAX_RANGE}")
    return list(range(a, b))


@tremor_fn("range::contains")
def contains(r: Any, n: Any) -> bool:
    """Whether `n` lies between the first and the last element of the range array `r` (Tremor's `fn`)."""
    items = want(r, list, "range::contains", "range")
    if not items:
        return False
    return bool(values.le(items[0], n) and values.ge(items[-1], n))
