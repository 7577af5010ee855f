"""What the connection clients share (`tcp_client`, `unix_socket_client`, `ws_client`).

One connection at a time. Events are written to it; what comes back is read
into the bounded `Inbox` as events (read and dropped when `out` is not
connected, so a close is still noticed). Every (re)connection is a new stream
id, so preprocessors restart cleanly after a reconnect.

The runtime's breaker does the rest: `connect` raises `ConnectionLost` when the
peer refuses, and the runtime retries by the connector's `reconnect` policy
with the breaker open (sources upstream stop). A connection that drops is
noticed by the reader (its end) and by `send` (`ConnectionLost`, so the batch
is sent again after reconnecting); `pull` raises `ConnectionLost` after the
stream's end so a source-only client reconnects too.

A kind implements `_open`: connect, and return the connection's chunks, its
sending side and the metadata of what it reads.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from contraflow.connectors.base import ConnectionLost, Connector, ConnectorContext, SinkEvent, SourceData
from contraflow.connectors.base.inbox import Inbox, pump
from contraflow.connectors.base.stream_server import Link
from contraflow.connectors.base.tls import loaded_tls

OptionsT = TypeVar("OptionsT")


@dataclass
class Opened:
    """A new connection: what it reads (chunks with their metadata), how to send on it, its metadata."""

    chunks: AsyncIterator[tuple[bytes, dict[str, Any]]]
    link: Link
    meta: dict[str, Any]


class StreamClient(Connector[OptionsT]):
    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.inbox = Inbox.for_streams(ctx)
        self.tls_context = loaded_tls(self.options)
        self._link: Link | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._streams = itertools.count(1)
        self._stream = 0
        self._lost = False

    async def _open(self) -> Opened:
        """Connect; `ConnectionLost` when the peer cannot be reached."""
        raise NotImplementedError

    @property
    def peer(self) -> str:
        """Who this client talks to, for messages."""
        raise NotImplementedError

    @property
    def connected(self) -> bool:
        return self._link is not None and not self._link.is_closing() and not self._lost

    async def connect(self) -> None:
        if self.connected:
            return
        await self._disconnect()
        opened = await self._open()
        self._link, self._lost = opened.link, False
        self._stream = next(self._streams)
        keep = "out" in self.ctx.outputs
        self._reader_task = asyncio.create_task(
            pump(opened.chunks, self.inbox, self._stream, opened.meta, self._on_end, keep=keep)
        )

    def _on_end(self) -> None:
        self._lost = True

    async def pull(self) -> SourceData | None:
        if self._lost and self.inbox.empty() and not self.ctx.quiescing.is_set():
            raise ConnectionLost(f"{self.peer} closed the connection")
        return await self.inbox.get()

    async def send(self, events: Sequence[SinkEvent]) -> None:
        if not self.connected or self._link is None:
            raise ConnectionLost(f"not connected to {self.peer}")
        try:
            await self._link.send(events)
        except ConnectionLost:
            self._lost = True  # reconnect even if the reader has not seen the end yet
            raise

    async def _disconnect(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            self._reader_task = None
        if self._link is not None:
            link, self._link = self._link, None
            await link.close()

    async def close(self) -> None:
        await self._disconnect()

    def status(self) -> dict[str, Any]:
        return {"connected": self.connected, "peer": self.peer}
