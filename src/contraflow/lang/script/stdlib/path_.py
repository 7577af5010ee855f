"""`std::path::try_default`: read a nested path with a fallback instead of an error."""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import MISSING, lookup


@tremor_fn("path::try_default")
def try_default(target: Any, segments: Any, default: Any) -> Any:
    """`path::try_default(event, ["a", 0, "b"], null)`: the value at that path, or `default`."""
    value = target
    for key in want(segments, list, "path::try_default", "path"):
        value = lookup(value, key)
        if value is MISSING:
            return default
    return value
