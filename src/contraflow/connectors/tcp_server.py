"""`tcp_server`: accepts TCP connections; each is one stream of events, and replies go back on it.

Config (Tremor's): `url` (`"host:port"` or `"tcp://host:port"`, required),
`buf_size` (bytes per read, default 8192), `backlog` (default 128),
`socket_options` (`TCP_NODELAY` default true, `SO_REUSEPORT` default false).

Source: every connection gets its own stream id, so the runtime keeps one
preprocessor chain per connection and a line split across two reads (or two
connections writing at once) is framed correctly. Events carry
`$stream = <id>` and `$tcp_server = {"tls": false, "peer": {"host", "port"}}`;
the end of a connection ends its stream. Reading pauses while the runtime
is not pulling (the queue is bounded), which closes the TCP window on peers.

Sink: an event is written to the connection named by its `$stream` (or by
`$tcp_server.peer`), which is how a flow answers on the connection a request
came from, as with Tremor's `$tcp_server` meta. An event for a connection
that is gone fails (non-retryable: the peer left); one with no routing meta
is written to every open connection.

Reconnects: a server has nothing to reconnect; if binding fails, `connect`
raises and the runtime retries by its `reconnect` policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contraflow.connectors.base import (
    ConnectionLost,
    Connector,
    ConnectorContext,
    DeliveryFailed,
    SinkEvent,
    SourceData,
    register,
)
from contraflow.connectors.inbox import Inbox, pump
from contraflow.connectors.options import ConfigReader
from contraflow.connectors.sockets import SocketOptions, close_writer, peer_of, tune, write


@dataclass
class _Peer:
    stream: int
    meta: dict[str, Any]
    writer: asyncio.StreamWriter

    @property
    def address(self) -> tuple[str, int]:
        peer = self.meta["tcp_server"]["peer"]
        return peer["host"], peer["port"]


@register("tcp_server")
class TcpServerConnector(Connector):
    config_keys = frozenset({"url", "buf_size", "backlog", "socket_options"})
    required_keys = frozenset({"url"})
    is_source = True
    is_sink = True

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.options, self.backlog = self.read(ctx.alias, ctx.config)
        self.inbox = Inbox(ctx.quiescing)
        self._server: asyncio.Server | None = None
        self._peers: dict[int, _Peer] = {}
        self._ids = itertools.count(1)
        self._handlers: set[asyncio.Task[Any]] = set()

    @classmethod
    def read(cls, alias: str, config: Mapping[str, Any]) -> tuple[SocketOptions, int]:
        backlog = ConfigReader(alias, cls.kind, config).integer("backlog", 128, minimum=1)
        return SocketOptions.read(alias, cls.kind, config), backlog

    @classmethod
    def check_config(cls, alias: str, config: Mapping[str, Any]) -> None:
        super().check_config(alias, config)
        cls.read(alias, config)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def connect(self) -> None:
        if self._server is not None:
            return
        url = self.options.url
        self._server = await asyncio.start_server(
            self._accept,
            url.host,
            url.port,
            backlog=self.backlog,
            reuse_port=self.options.reuse_port or None,
            limit=self.options.buf_size,
        )
        self.ctx.logger.info("listening on %s:%d", url.host, self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.ctx.quiescing.is_set():
            await close_writer(writer)
            return
        tune(writer, self.options)
        stream = next(self._ids)
        meta = {"stream": stream, "tcp_server": {"tls": False, "peer": peer_of(writer)}}
        peer = _Peer(stream, meta, writer)
        self._peers[stream] = peer
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await pump(reader, self.inbox, stream, meta, self.options.buf_size)
        finally:
            self._handlers.discard(task)  # type: ignore[arg-type]
        # The peer closed its side; replies may still be written until it closes completely.

    async def pull(self) -> SourceData | None:
        item = await self.inbox.get()
        if item is not None and item.end_stream:
            self._forget_if_closed(item.stream)
        return item

    def _forget_if_closed(self, stream: int) -> None:
        peer = self._peers.get(stream)
        if peer is not None and peer.writer.is_closing():
            del self._peers[stream]

    async def send(self, events: Sequence[SinkEvent]) -> None:
        for event in events:
            data = b"".join(event.frames)
            for peer in self._targets(event):
                try:
                    await write(peer.writer, data, f"connection {peer.stream}")
                except ConnectionLost as err:
                    self._peers.pop(peer.stream, None)
                    raise DeliveryFailed(f"{err}", retryable=False) from err

    def _targets(self, event: SinkEvent) -> list[_Peer]:
        meta = event.meta.get("tcp_server")
        stream = event.stream
        if stream is None and isinstance(meta, dict) and isinstance(meta.get("peer"), dict):
            wanted = (meta["peer"].get("host"), meta["peer"].get("port"))
            stream = next((p.stream for p in self._peers.values() if p.address == wanted), -1)
        if stream is None:
            return list(self._peers.values())
        peer = self._peers.get(stream)
        if peer is None:
            raise DeliveryFailed(f"connection {stream} is closed", retryable=False)
        return [peer]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for handler in list(self._handlers):
            handler.cancel()
        peers, self._peers = list(self._peers.values()), {}
        for peer in peers:
            await close_writer(peer.writer)
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    def status(self) -> dict[str, Any]:
        return {"connections": len(self._peers)}
