"""`float::` functions."""

from __future__ import annotations

import math
from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail


@tremor_fn("float::parse")
def parse(s: Any) -> float:
    text = want(s, str, "float::parse").strip()
    try:
        return float(text)
    except ValueError:
        fail(f"float::parse: not a number: {text!r}")


@tremor_fn("float::from_integer")
def from_integer(i: Any) -> float:
    return float(want(i, int, "float::from_integer"))


def _number(value: Any, fn: str) -> float | int:
    return want(value, (int, float), fn, "number")


@tremor_fn("float::is_finite")
def is_finite(n: Any) -> bool:
    """False for NaN and infinities; always true for integers."""
    return math.isfinite(_number(n, "float::is_finite"))


@tremor_fn("float::is_nan")
def is_nan(n: Any) -> bool:
    return math.isnan(_number(n, "float::is_nan"))


@tremor_fn("float::is_infinite")
def is_infinite(n: Any) -> bool:
    return math.isinf(_number(n, "float::is_infinite"))
