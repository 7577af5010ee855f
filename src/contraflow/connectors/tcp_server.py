"""`tcp_server`: accepts TCP connections; each is one stream of events, and replies go back on it.

Config (Tremor's): `url` (`"host:port"` or `"tcp://host:port"`, required),
`buf_size` (bytes per read, default 8192), `backlog` (default 128),
`socket_options` (`TCP_NODELAY` default true, `SO_REUSEPORT` default false).

Source: every connection gets its own stream id, so the runtime keeps one
preprocessor chain per connection and a line split across two reads (or two
connections writing at once) is framed correctly. Events carry
`$tcp_server = {"tls": false, "peer": {"host", "port"}}`; the end of a
connection ends its stream. Reading pauses while the runtime
is not pulling (the queue is bounded), which closes the TCP window on peers.

Sink: an event is written to the connection named by its `$tcp_server.peer`,
which is how a flow answers on the connection a request came from, as with
Tremor's `$tcp_server` meta (a pipeline that passes `$` on keeps it). An
event for a connection that is gone, or without that meta, becomes an error
event on this connector's `err` port (there is no one to send it to), and the
rest of the batch is delivered.

After a peer ends its side of a connection, replies can still be sent on it
for `REPLY_LINGER_S` (10 s), then it is closed.

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
from contraflow.connectors.base.inbox import Inbox, pump
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.sockets import SocketOptions, close_writer, peer_of, tune, write
from contraflow.connectors.base.undelivered import report_undelivered

# How long replies can still be sent on a connection after the peer stopped sending.
REPLY_LINGER_S = 10.0


@dataclass
class _Peer:
    stream: int
    address: tuple[str, int]
    writer: asyncio.StreamWriter


@register("tcp_server")
class TcpServerConnector(Connector[tuple[SocketOptions, int]]):
    config_keys = frozenset({"url", "buf_size", "backlog", "socket_options"})
    required_keys = frozenset({"url"})

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.socket, self.backlog = self.options
        self.inbox = Inbox(ctx.quiescing)
        self._server: asyncio.Server | None = None
        self._peers: dict[tuple[str, int], _Peer] = {}  # by peer (host, port)
        self._ids = itertools.count(1)
        self._handlers: set[asyncio.Task[Any]] = set()
        self._closing = False

    @classmethod
    def read_config(cls, alias: str, config: Mapping[str, Any]) -> tuple[SocketOptions, int]:
        backlog = ConfigReader(alias, cls.kind, config).integer("backlog", 128, minimum=1)
        return SocketOptions.read(alias, cls.kind, config), backlog

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def connect(self) -> None:
        if self._server is not None:
            return
        url = self.socket.url
        self._server = await asyncio.start_server(
            self._accept,
            url.host,
            url.port,
            backlog=self.backlog,
            reuse_port=self.socket.reuse_port or None,
            limit=self.socket.buf_size,
        )
        self.ctx.logger.info("listening on %s:%d", url.host, self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.ctx.quiescing.is_set():
            await close_writer(writer)
            return
        tune(writer, self.socket)
        stream = next(self._ids)
        address = peer_of(writer)
        meta = {"tcp_server": {"tls": False, "peer": address}}
        peer = _Peer(stream, (address["host"], address["port"]), writer)
        self._peers[peer.address] = peer
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await pump(reader, self.inbox, stream, meta, self.socket.buf_size)
            # The peer closed its sending side; replies can still go out for a while (half-close).
            await asyncio.sleep(REPLY_LINGER_S)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # close() ended this handler: return normally, asyncio's server logs cancelled handlers.
        finally:
            if task is not None:
                self._handlers.discard(task)
            if self._peers.get(peer.address) is peer:
                del self._peers[peer.address]
            await close_writer(writer)

    async def pull(self) -> SourceData | None:
        return await self.inbox.get()

    async def send(self, events: Sequence[SinkEvent]) -> None:
        """Write each event to its connection; one that cannot be (peer gone, no peer meta) becomes an
        error event on `err` while the rest of the batch is delivered."""
        for event in events:
            try:
                peer = self._target(event)
                try:
                    host, port = peer.address
                    await write(peer.writer, b"".join(event.frames), f"the connection from {host}:{port}")
                except ConnectionLost as err:
                    self._peers.pop(peer.address, None)
                    raise DeliveryFailed(str(err), retryable=False) from err
            except DeliveryFailed as err:
                report_undelivered(self.ctx, self.inbox, str(err), event)

    def _target(self, event: SinkEvent) -> _Peer:
        meta = event.meta.get("tcp_server")
        peer = meta.get("peer") if isinstance(meta, dict) else None
        if not isinstance(peer, dict):
            raise DeliveryFailed("the event has no $tcp_server.peer to send it to", retryable=False)
        address = (peer.get("host"), peer.get("port"))
        target = self._peers.get(address)  # type: ignore[arg-type]
        if target is None or target.writer.is_closing():
            self._peers.pop(address, None)  # type: ignore[arg-type]
            raise DeliveryFailed(f"the connection from {address[0]}:{address[1]} is closed", retryable=False)
        return target

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._closing = True
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
