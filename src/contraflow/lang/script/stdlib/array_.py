"""`array::` functions."""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import register_sizes, want
from contraflow.lang.script.values import eq, fail, lt, to_text

register_sizes("array", list)


@tremor_fn("array::contains")
def contains(a: Any, value: Any) -> bool:
    return any(eq(x, value) for x in want(a, list, "array::contains"))


@tremor_fn("array::push")
def push(a: Any, value: Any) -> list[Any]:
    """A new array with `value` appended (values are immutable)."""
    return [*want(a, list, "array::push"), value]


@tremor_fn("array::concatenate")
def concatenate(a: Any, b: Any) -> list[Any]:
    return want(a, list, "array::concatenate") + want(b, list, "array::concatenate")


@tremor_fn("array::zip")
def zip_(a: Any, b: Any) -> list[list[Any]]:
    left, right = want(a, list, "array::zip"), want(b, list, "array::zip")
    if len(left) != len(right):
        fail(f"array::zip: arrays have different lengths ({len(left)} and {len(right)})")
    return [[x, y] for x, y in zip(left, right, strict=True)]


@tremor_fn("array::unzip")
def unzip(a: Any) -> list[list[Any]]:
    pairs = want(a, list, "array::unzip")
    if not all(type(p) is list and len(p) == 2 for p in pairs):
        fail("array::unzip: expects an array of two-element arrays")
    return [[p[0] for p in pairs], [p[1] for p in pairs]]


@tremor_fn("array::flatten")
def flatten(a: Any) -> list[Any]:
    """Flattens nested arrays all the way down."""
    out: list[Any] = []
    for item in want(a, list, "array::flatten"):
        out.extend(flatten(item) if type(item) is list else [item])
    return out


@tremor_fn("array::coalesce")
def coalesce(a: Any) -> list[Any]:
    """The array without its nulls."""
    return [x for x in want(a, list, "array::coalesce") if x is not None]


@tremor_fn("array::join")
def join(a: Any, sep: Any) -> str:
    return want(sep, str, "array::join", "separator").join(to_text(x) for x in want(a, list, "array::join"))


@tremor_fn("array::reverse")
def reverse(a: Any) -> list[Any]:
    return want(a, list, "array::reverse")[::-1]


@tremor_fn("array::sort")
def sort(a: Any) -> list[Any]:
    """Sorted with Tremor's ordering (numbers, or strings); mixed kinds are an error."""
    import functools

    items = list(want(a, list, "array::sort"))
    return sorted(items, key=functools.cmp_to_key(lambda x, y: -1 if lt(x, y) else (1 if lt(y, x) else 0)))
