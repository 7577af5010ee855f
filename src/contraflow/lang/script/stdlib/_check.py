"""Argument checks shared by the library modules: wrong types are runtime errors, as in Tremor."""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.values import fail, type_name


def want(value: Any, kind: type | tuple[type, ...], fn: str, what: str = "argument") -> Any:
    """`value` if it has the Python type `kind` (bools are never numbers), else a runtime error."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if type(value) in kinds:
        return value
    names = "/".join(_NAMES.get(k, k.__name__) for k in kinds)
    fail(f"{fn}: {what} must be {names}, got {type_name(value)}")


_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a float",
    list: "an array",
    dict: "a record",
    bool: "a bool",
    bytes: "a binary",
}
