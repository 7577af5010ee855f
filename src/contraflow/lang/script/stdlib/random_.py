"""`std::random::` functions: uniformly distributed values.

Tremor seeds its generator from the event's ingest time; scripts here have no
ingest time of their own, so the values come from Python's generator. Tests
can only check ranges and lengths, as with Tremor's own.
"""

from __future__ import annotations

import random as _random
import string as _string
from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import INT_MAX, INT_MIN, fail

_ALPHANUMERIC = _string.ascii_letters + _string.digits


@tremor_fn("random::bool")
def bool_() -> bool:
    return _random.random() < 0.5


@tremor_fn("random::string")
def string(length: Any) -> str:
    n = want(length, int, "random::string", "length")
    if n < 0:
        fail(f"random::string: length must be zero or more, got {n}")
    return "".join(_random.choices(_ALPHANUMERIC, k=n))


@tremor_fn("random::integer")
def integer(*bounds: Any) -> int:
    """`()` any integer, `(high)` 0 to high-1, `(low, high)` low to high-1."""
    low, high = _bounds("random::integer", bounds, int, INT_MIN, INT_MAX + 1)
    return _random.randrange(low, high)


@tremor_fn("random::float")
def float_(*bounds: Any) -> float:
    """`()` 0.0 to 1.0, `(high)` 0.0 to high, `(low, high)` low to high (high excluded)."""
    low, high = _bounds("random::float", bounds, float, 0.0, 1.0)
    return low + (high - low) * _random.random()


def _bounds(fn: str, bounds: tuple[Any, ...], kind: type, low: Any, high: Any) -> tuple[Any, Any]:
    if len(bounds) > 2:
        fail(f"{fn} takes 0 to 2 arguments, got {len(bounds)}")
    values = [want(b, kind, fn, "bound") for b in bounds]
    if len(values) == 1:
        low, high = kind(0), values[0]
    elif len(values) == 2:
        low, high = values
    if not low < high:
        fail(f"{fn}: the lower bound must be below the upper bound, got {low} and {high}")
    return low, high
