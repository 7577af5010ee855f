"""Argument checks shared by the library modules: wrong types are runtime errors, as in Tremor."""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.values import fail, type_name


def want(value: Any, kind: type | tuple[type, ...], fn: str, what: str = "argument") -> Any:
    """`value` if it has the Python type `kind` (bools are never numbers), else a runtime error."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if type(value) in kinds:
        return value
    names = "/".join(_NAMES.get(k, k.__name__) for k in kinds)
    fail(f"{fn}: {what} must be {names}, got {type_name(value)}")


def register_sizes(module: str, kind: type) -> None:
    """`<module>::len` and `<module>::is_empty`, which arrays and records define alike."""

    def len_(collection: Any) -> int:
        return len(want(collection, kind, f"{module}::len"))

    def is_empty(collection: Any) -> bool:
        return not want(collection, kind, f"{module}::is_empty")

    tremor_fn(f"{module}::len")(len_)
    tremor_fn(f"{module}::is_empty")(is_empty)


_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a float",
    list: "an array",
    dict: "a record",
    bool: "a bool",
    bytes: "a binary",
}
