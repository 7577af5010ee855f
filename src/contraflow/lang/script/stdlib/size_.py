"""`std::size::` functions: byte sizes in binary units (`size::MiB(2)` is 2097152)."""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import check_int

_UNITS = ("kiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def _register(name: str, power: int) -> None:
    full = f"size::{name}"

    def convert(n: Any) -> int:
        return check_int(want(n, int, full) * 1024**power)

    convert.__doc__ = f"`{name}(n)`: n {name} in bytes."
    tremor_fn(full)(convert)


for _power, _name in enumerate(_UNITS, start=1):
    _register(_name, _power)


@tremor_fn("size::kibi")
def kibi(n: Any) -> int:
    """`kibi(n)`: n KiB in bytes (Tremor 0.13's names)."""
    return check_int(want(n, int, "size::kibi") * 1024)


@tremor_fn("size::mebi")
def mebi(n: Any) -> int:
    return check_int(want(n, int, "size::mebi") * 1024**2)
