"""A bounded queue between socket readers and `pull()`, so TCP flow control is the back-pressure.

Reader tasks (one per connection) `put` what they read; when the queue is
full they wait, stop reading, and the kernel's receive window closes on the
peer. `pull()` takes the next item or returns None once the flow quiesces.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from contraflow.connectors.base import SourceData
from contraflow.stopping import STOPPED, unless_stopped

DEFAULT_CAPACITY = 64


class Inbox:
    def __init__(self, stop: asyncio.Event, capacity: int = DEFAULT_CAPACITY) -> None:
        self.stop = stop
        self._queue: asyncio.Queue[SourceData] = asyncio.Queue(capacity)

    def empty(self) -> bool:
        return self._queue.empty()

    async def put(self, item: SourceData) -> None:
        await self._queue.put(item)

    def put_nowait(self, item: SourceData) -> bool:
        """For datagrams, which cannot wait: False when full (the datagram is dropped)."""
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            return False
        return True

    async def get(self) -> SourceData | None:
        """The next item, waiting for it; None when the flow quiesces first."""
        if not self._queue.empty():
            return self._queue.get_nowait()
        item = await unless_stopped(self._queue.get(), self.stop)
        return None if item is STOPPED else item


async def pump(
    chunks: AsyncIterator[tuple[bytes, dict[str, Any]]],
    inbox: Inbox,
    stream: int,
    meta: dict[str, Any],
    on_end: Callable[[], None] = lambda: None,
    keep: bool = True,
) -> None:
    """Copy one connection's chunks (data and its metadata) into the inbox as `stream`, then its end
    (with `meta`).

    With `keep=False` (nothing reads the connector's output) the chunks are read
    and dropped, so the peer is not held back and a closed connection is noticed."""
    try:
        async for data, chunk_meta in chunks:
            if keep:
                await inbox.put(SourceData(data=data, stream=stream, meta=chunk_meta))
    finally:
        on_end()
    if keep:
        await inbox.put(SourceData(stream=stream, meta=meta, end_stream=True))
