"""`float::` functions."""

from __future__ import annotations

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
