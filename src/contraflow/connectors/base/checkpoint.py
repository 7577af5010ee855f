"""Durable source positions: a small JSON file per connector, written latest-wins.

A source that acknowledges (file) saves "everything before here was
delivered" so a restarted runtime resumes there. Saves are atomic (temp file,
fsync, rename) and coalesced: while one write is in flight, newer positions
replace each other and only the newest is written next. A crash therefore
loses at most the positions acknowledged during one write, which means a few
duplicates after restart, never a gap.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import orjson

from contraflow.atomic_files import write_atomic


class Checkpoint:
    """One connector's saved position (any JSON record), in `directory/name.json`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._latest: dict[str, Any] | None = None
        self._writer: asyncio.Task[None] | None = None

    def load(self) -> dict[str, Any] | None:
        """The last saved record; None when there is none or it is unreadable."""
        try:
            value = orjson.loads(self.path.read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            return None
        return value if isinstance(value, dict) else None

    def save(self, record: dict[str, Any]) -> None:
        """Schedule `record` to be written; returns at once."""
        self._latest = record
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain())

    async def _drain(self) -> None:
        while self._latest is not None:
            record, self._latest = self._latest, None
            await asyncio.to_thread(self._write, record)

    def write_now(self, record: dict[str, Any]) -> None:
        """Write `record` synchronously (from a worker thread), e.g. before the first write it guards."""
        self._write(record)

    def _write(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, orjson.dumps(record))

    async def flush(self) -> None:
        """Wait until the newest record is on disk (on close)."""
        if self._writer is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        if self._latest is not None:
            await self._drain()
