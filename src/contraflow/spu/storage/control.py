"""Control values: small named values one process publishes for the others.

The runtime and Spark's Python workers share no memory, so signals that flow
against the data (back-pressure credit, circuit-breaker state) are published
here, on the SPU, next to the data. Values are JSON scalars or small objects,
kept in memory and written through to one file atomically, so a restarted SPU
still answers with the last published value.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson

from contraflow.atomic_files import write_atomic
from contraflow.errors import UserError

MAX_NAME_LENGTH = 255
MAX_VALUE_BYTES = 64 * 1024


class ControlValues:
    """A durable map of name -> JSON value."""

    def __init__(self, directory: Path) -> None:
        self._path = directory / "values.json"
        self._lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)
        self._values: dict[str, Any] = orjson.loads(self._path.read_bytes()) if self._path.exists() else {}

    def get(self, name: str) -> Any:
        """The value last set under `name`, or None."""
        return self._values.get(name)

    def set(self, name: str, value: Any) -> None:
        """Publish `value` under `name`; None removes the name."""
        check_control_value(name, value)
        with self._lock:
            if self._values.get(name) == value:
                return
            if value is None:
                self._values.pop(name, None)
            else:
                self._values[name] = value
            write_atomic(self._path, orjson.dumps(self._values))


def check_control_value(name: str, value: Any) -> None:
    """Names of 1-255 characters, values of at most 64 KiB as JSON (lone SPU and cluster alike)."""
    if not name or len(name) > MAX_NAME_LENGTH:
        raise UserError(f"control value names have 1 to {MAX_NAME_LENGTH} characters, not {len(name)}")
    encoded = orjson.dumps(value)
    if len(encoded) > MAX_VALUE_BYTES:
        raise UserError(f"control value {name!r} is {len(encoded)} bytes; at most {MAX_VALUE_BYTES} allowed")
