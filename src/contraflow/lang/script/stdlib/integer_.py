"""`integer::` functions."""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import check_int, fail


@tremor_fn("integer::parse")
def parse(s: Any) -> int:
    text = want(s, str, "integer::parse").strip()
    try:
        return check_int(int(text, 10))
    except ValueError:
        fail(f"integer::parse: not an integer: {text!r}")


@tremor_fn("integer::from_float")
def from_float(f: Any) -> int:
    value = want(f, (int, float), "integer::from_float")
    if value != value or value in (float("inf"), float("-inf")):
        fail(f"integer::from_float: cannot convert {value}")
    return check_int(int(value))
