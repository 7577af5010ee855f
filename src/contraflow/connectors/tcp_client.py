"""`tcp_client`: one TCP connection; events are written to it and what comes back is read as events.

Config (Tremor's): `url` (`"host:port"`, required), `buf_size` (default
8192), `socket_options` (`TCP_NODELAY` default true).

Each (re)connection is a new stream id, so preprocessors restart cleanly
after a reconnect. Incoming events carry `$tcp_client = {"peer": {...}}`.

Reconnects: `connect` raises `ConnectionLost` when the server refuses; the
runtime retries it by the connector's `reconnect` policy with the circuit
breaker open. A connection that drops is noticed by the reader (end of
stream) and by `send` (`ConnectionLost`, so the batch is sent again after
reconnecting); `pull` raises `ConnectionLost` after the stream's end so a
source-only client reconnects too.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from contraflow.connectors.base import (
    ConnectionLost,
    Connector,
    ConnectorContext,
    SinkEvent,
    SourceData,
    register,
)
from contraflow.connectors.base.inbox import Inbox, pump
from contraflow.connectors.base.sockets import SocketOptions, close_writer, peer_of, tune, write


@register("tcp_client")
class TcpClientConnector(Connector[SocketOptions]):
    config_keys = frozenset({"url", "buf_size", "socket_options"})
    required_keys = frozenset({"url"})

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.inbox = Inbox(ctx.quiescing)
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._streams = itertools.count(1)
        self._stream = 0
        self._lost = False

    @classmethod
    def read_config(cls, alias: str, config: Mapping[str, Any]) -> SocketOptions:
        return SocketOptions.read(alias, cls.kind, config)

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing() and not self._lost

    async def connect(self) -> None:
        if self.connected:
            return
        await self._disconnect()
        url = self.options.url
        try:
            reader, writer = await asyncio.open_connection(url.host, url.port, limit=self.options.buf_size)
        except OSError as err:
            raise ConnectionLost(f"cannot connect to {url}: {err.strerror or err}") from err
        tune(writer, self.options)
        self._writer, self._lost = writer, False
        self._stream = next(self._streams)
        meta = {"tcp_client": {"peer": peer_of(writer)}}
        self._reader_task = asyncio.create_task(
            pump(
                reader,
                self.inbox,
                self._stream,
                meta,
                self.options.buf_size,
                self._on_end,
                keep="out" in self.ctx.outputs,
            )
        )

    def _on_end(self) -> None:
        self._lost = True

    async def pull(self) -> SourceData | None:
        if self._lost and self.inbox.empty() and not self.ctx.quiescing.is_set():
            raise ConnectionLost(f"{self.options.url} closed the connection")
        return await self.inbox.get()

    async def send(self, events: Sequence[SinkEvent]) -> None:
        if not self.connected or self._writer is None:
            raise ConnectionLost(f"not connected to {self.options.url}")
        try:
            await write(self._writer, b"".join(f for e in events for f in e.frames), str(self.options.url))
        except ConnectionLost:
            self._lost = True  # reconnect even if the reader has not seen the end yet
            raise

    async def _disconnect(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            self._reader_task = None
        if self._writer is not None:
            writer, self._writer = self._writer, None
            await close_writer(writer)

    async def close(self) -> None:
        await self._disconnect()

    def status(self) -> dict[str, Any]:
        return {"connected": self.connected, "peer": str(self.options.url)}
