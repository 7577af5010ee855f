"""`binary::` functions: binaries (bytes) and arrays of byte values."""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail


@tremor_fn("binary::len")
def len_(b: Any) -> int:
    return len(want(b, bytes, "binary::len"))


@tremor_fn("binary::into_bytes")
def into_bytes(b: Any) -> list[int]:
    return list(want(b, bytes, "binary::into_bytes"))


@tremor_fn("binary::from_bytes")
def from_bytes(values: Any) -> bytes:
    items = want(values, list, "binary::from_bytes")
    if not all(type(v) is int and 0 <= v <= 255 for v in items):
        fail("binary::from_bytes: every element must be an integer from 0 to 255")
    return bytes(items)
