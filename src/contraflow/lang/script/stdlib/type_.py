"""`type::` functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.values import type_name


@tremor_fn("type::as_string")
def as_string(v: Any) -> str:
    return type_name(v)


@tremor_fn("type::is_null")
def is_null(v: Any) -> bool:
    return v is None


def _is(*types: type) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        return type(v) in types

    return check


# `type::is_<name>`: the value's own type is one of these (a bool is not an integer, as in Tremor).
for _name, _types in (
    ("bool", (bool,)),
    ("integer", (int,)),
    ("float", (float,)),
    ("number", (int, float)),
    ("string", (str,)),
    ("array", (list,)),
    ("record", (dict,)),
    ("binary", (bytes,)),
):
    tremor_fn(f"type::is_{_name}")(_is(*_types))
