"""`math::` functions."""

from __future__ import annotations

import math
from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import check_int, fail, lt

_NUM = (int, float)


def _rounded(x: Any, fn: str, how: Any) -> int:
    value = want(x, _NUM, fn)
    if type(value) is int:
        return value
    if math.isnan(value) or math.isinf(value):
        fail(f"{fn}: cannot round {value}")
    return check_int(int(how(value)))


@tremor_fn("math::floor")
def floor(x: Any) -> int:
    return _rounded(x, "math::floor", math.floor)


@tremor_fn("math::ceil")
def ceil(x: Any) -> int:
    return _rounded(x, "math::ceil", math.ceil)


@tremor_fn("math::round")
def round_(x: Any) -> int:
    """Rounds half away from zero, like Rust's f64::round."""
    return _rounded(x, "math::round", lambda v: math.floor(v + 0.5) if v >= 0 else math.ceil(v - 0.5))


@tremor_fn("math::trunc")
def trunc(x: Any) -> int:
    return _rounded(x, "math::trunc", math.trunc)


@tremor_fn("math::max")
def max_(a: Any, b: Any) -> Any:
    want(a, _NUM, "math::max")
    want(b, _NUM, "math::max")
    return b if lt(a, b) else a


@tremor_fn("math::min")
def min_(a: Any, b: Any) -> Any:
    want(a, _NUM, "math::min")
    want(b, _NUM, "math::min")
    return b if lt(b, a) else a


@tremor_fn("math::abs")
def abs_(x: Any) -> Any:
    value = want(x, _NUM, "math::abs")
    return check_int(abs(value)) if type(value) is int else abs(value)


@tremor_fn("math::sqrt")
def sqrt(x: Any) -> float:
    value = want(x, _NUM, "math::sqrt")
    if value < 0:
        fail("math::sqrt: negative argument")
    return math.sqrt(value)
