"""`std::time::nanos::` functions: durations in nanoseconds, as Troy `with` values use them."""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import check_int

_UNITS = {
    "from_nanos": 1,
    "from_micros": 1_000,
    "from_millis": 1_000_000,
    "from_seconds": 1_000_000_000,
    "from_minutes": 60_000_000_000,
    "from_hours": 3_600_000_000_000,
    "from_days": 86_400_000_000_000,
}


def _register(name: str, factor: int) -> None:
    full = f"time::nanos::{name}"

    def convert(n: Any) -> int:
        return check_int(want(n, int, full) * factor)

    convert.__doc__ = f"`{name}(n)`: n units in nanoseconds."
    tremor_fn(full)(convert)


for _name, _factor in _UNITS.items():
    _register(_name, _factor)
