"""A bounded queue between socket readers and `pull()`, so TCP flow control is the back-pressure.

Reader tasks (one per connection) `put` what they read; when the queue is
full they wait, stop reading, and the kernel's receive window closes on the
peer. `pull()` takes the next item or returns None once the flow quiesces.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from contraflow.connectors.base import ConnectorContext, SourceData
from contraflow.stopping import STOPPED, unless_stopped

DEFAULT_CAPACITY = 64
# The most bytes chunks are joined to (see `Inbox(joins=True)`): a pull of ~300 events of 200 bytes.
JOIN_LIMIT = 1 << 16
# Preprocessors that frame a stream whatever its chunks: chunks of one stream can be joined before them.
STREAM_FRAMING = frozenset({"separate", "lines", "length-prefixed", "textual-length-prefixed"})


def chunks_can_join(preprocessors: Sequence[Any]) -> bool:
    """True when the first preprocessor frames across chunk boundaries, so feeding it two chunks of a
    stream joined is the same as feeding them one after the other (a buffering `separate`, a length
    prefix); not for per-chunk stages (`base64`, `decompress`) or no preprocessor (a chunk is a frame)."""
    if not preprocessors or preprocessors[0].name not in STREAM_FRAMING:
        return False
    return preprocessors[0].config.get("buffered", True) is not False


class Inbox:
    """A bounded queue with one reader (`pull`), many writers (connections).

    With `joins=True` (`chunks_can_join`), a data chunk put behind a waiting
    one of the same stream and meta joins it (up to `JOIN_LIMIT` bytes), and
    `get()` hands out the waiting chunks of one stream as one: a WebSocket peer
    sends an event per message, and a pull per message (or per 64 messages, the
    capacity in items) costs the runtime a decode and a log append per few
    events. Joining as they are put makes the capacity one of bytes, not messages.
    """

    def __init__(self, stop: asyncio.Event, capacity: int = DEFAULT_CAPACITY, joins: bool = False) -> None:
        self.stop = stop
        self.capacity = capacity
        self.joins = joins
        self._items: deque[SourceData] = deque()
        # The parts of the last item while data chunks join it (`joins=True`), joined when taken.
        self._tail: list[bytes] = []
        self._tail_size = 0
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()

    @classmethod
    def for_streams(cls, ctx: ConnectorContext) -> Inbox:
        """The inbox of a connector reading byte streams: joining chunks where its preprocessors allow."""
        return cls(ctx.quiescing, joins=chunks_can_join(ctx.spec.preprocessors))

    def empty(self) -> bool:
        return not self._items

    async def put(self, item: SourceData) -> None:
        if self.joins and self._joins_tail(item):
            return
        while len(self._items) >= self.capacity:
            self._writable.clear()
            await self._writable.wait()
        self._append(item)

    def put_nowait(self, item: SourceData) -> bool:
        """For datagrams, which cannot wait: False when full (the datagram is dropped)."""
        if len(self._items) >= self.capacity:
            return False
        self._append(item)
        return True

    def _append(self, item: SourceData) -> None:
        self._seal_tail()
        self._items.append(item)
        if self.joins and _joinable(item):
            self._tail, self._tail_size = [item.data or b""], len(item.data or b"")
        self._readable.set()

    def _joins_tail(self, item: SourceData) -> bool:
        """Add a data chunk to the last waiting one of its stream and meta, if it has room."""
        if not self._tail or not self._items or not _joinable(item):
            return False
        last = self._items[-1]
        if item.stream != last.stream or item.meta is not last.meta or self._tail_size >= JOIN_LIMIT:
            return False
        data = item.data or b""
        self._tail.append(data)
        self._tail_size += len(data)
        return True

    def _seal_tail(self) -> None:
        """The last item's joined parts become its data (before it is taken or another item follows)."""
        if len(self._tail) > 1:
            last = self._items[-1]
            self._items[-1] = SourceData(
                data=b"".join(self._tail), stream=last.stream, meta=last.meta, port=last.port
            )
        self._tail, self._tail_size = [], 0

    async def get(self) -> SourceData | None:
        """The next item, waiting for it; None when the flow quiesces first."""
        if not self._items and await unless_stopped(self._wait_readable(), self.stop) is STOPPED:
            return None
        self._seal_tail()  # what joined the last chunk is part of it before anything is taken
        item = self._items.popleft()
        if self.joins and _joinable(item):
            item = self._joined(item)
        if not self._items:
            self._readable.clear()
        self._writable.set()
        return item

    async def _wait_readable(self) -> None:
        while not self._items:
            self._readable.clear()
            await self._readable.wait()

    def _joined(self, first: SourceData) -> SourceData:
        """`first` and the chunks after it of the same stream and meta, as one chunk."""
        parts, size = [first.data or b""], len(first.data or b"")
        while self._items and size < JOIN_LIMIT:
            item = self._items[0]
            if not _joinable(item) or item.stream != first.stream or item.meta is not first.meta:
                break
            self._items.popleft()
            parts.append(item.data or b"")
            size += len(parts[-1])
        if len(parts) == 1:
            return first
        return SourceData(data=b"".join(parts), stream=first.stream, meta=first.meta, port=first.port)


def _joinable(item: SourceData) -> bool:
    """A plain data chunk: nothing acked, resumed or ended by it."""
    return (
        item.data is not None
        and not item.end_stream
        and item.token is None
        and item.position is None
        and item.events is None
    )


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
