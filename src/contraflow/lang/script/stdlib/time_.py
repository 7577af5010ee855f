"""`std::time::nanos::` functions and constants: durations in nanoseconds, as Troy `with` values use them.

`from_<unit>(n)` turns n units into nanoseconds, `to_<unit>(ns)` back (integer
division, as Tremor's `fn`s do); `NANOS_PER_<UNIT>` are the factors.
"""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_const, tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import check_int, div

_UNITS = {
    "from_nanos": 1,
    "from_micros": 1_000,
    "from_millis": 1_000_000,
    "from_seconds": 1_000_000_000,
    "from_minutes": 60_000_000_000,
    "from_hours": 3_600_000_000_000,
    "from_days": 86_400_000_000_000,
    "from_weeks": 604_800_000_000_000,
}


def _register(name: str, factor: int) -> None:
    full = f"time::nanos::{name}"

    def convert(n: Any) -> int:
        return check_int(want(n, int, full) * factor)

    convert.__doc__ = f"`{name}(n)`: n units in nanoseconds."
    tremor_fn(full)(convert)


def _register_to(unit: str, factor: int) -> None:
    full = f"time::nanos::to_{unit}"

    def convert(ns: Any) -> Any:
        return div(want(ns, (int, float), full), factor)  # Tremor's `fn` divides with `/`

    convert.__doc__ = f"`to_{unit}(ns)`: ns nanoseconds in {unit}, divided as the script's `/` does."
    tremor_fn(full)(convert)


for _name, _factor in _UNITS.items():
    _register(_name, _factor)
    _unit = _name.removeprefix("from_")
    if _unit != "nanos":
        _register_to(_unit, _factor)

for _const, _factor in {
    "MICROSECOND": 1_000,
    "MILLISECOND": 1_000_000,
    "SECOND": 1_000_000_000,
    "MINUTE": 60_000_000_000,
    "HOUR": 3_600_000_000_000,
    "DAY": 86_400_000_000_000,
    "WEEK": 604_800_000_000_000,
}.items():
    tremor_const(f"time::nanos::NANOS_PER_{_const}", _factor)
