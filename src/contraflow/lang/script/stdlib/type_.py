"""`type::` functions."""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.values import type_name


@tremor_fn("type::as_string")
def as_string(v: Any) -> str:
    return type_name(v)


@tremor_fn("type::is_null")
def is_null(v: Any) -> bool:
    return v is None


@tremor_fn("type::is_bool")
def is_bool(v: Any) -> bool:
    return type(v) is bool


@tremor_fn("type::is_integer")
def is_integer(v: Any) -> bool:
    return type(v) is int


@tremor_fn("type::is_float")
def is_float(v: Any) -> bool:
    return type(v) is float


@tremor_fn("type::is_number")
def is_number(v: Any) -> bool:
    return type(v) in (int, float)


@tremor_fn("type::is_string")
def is_string(v: Any) -> bool:
    return type(v) is str


@tremor_fn("type::is_array")
def is_array(v: Any) -> bool:
    return type(v) is list


@tremor_fn("type::is_record")
def is_record(v: Any) -> bool:
    return type(v) is dict


@tremor_fn("type::is_binary")
def is_binary(v: Any) -> bool:
    return type(v) is bytes
