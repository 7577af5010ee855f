"""`tcp_server`: accepts TCP connections; each is one stream of events, and replies go back on it.

Config (Tremor's): `url` (`"host:port"` or `"tcp://host:port"`, required),
`buf_size` (bytes per read, default 8192), `backlog` (default 128),
`socket_options` (`TCP_NODELAY` default true, `SO_REUSEPORT` default false,
`SO_REUSEADDR` accepted), `tls` (`{"cert", "key"}`, optional `"cafile"` to
require client certificates: `contraflow.connectors.base.tls`).

Source: every connection gets its own stream id, so the runtime keeps one
preprocessor chain per connection and a line split across two reads (or two
connections writing at once) is framed correctly. Events carry
`$tcp_server = {"tls": bool, "peer": {"host", "port"}}`; the end of a
connection ends its stream. Reading pauses while the runtime
is not pulling (the queue is bounded), which closes the TCP window on peers.

Sink: an event is written to the connection named by its `$tcp_server.peer`,
which is how a flow answers on the connection a request came from, as with
Tremor's `$tcp_server` meta (a pipeline that passes `$` on keeps it). An
event for a connection that is gone, or without that meta, becomes an error
event on this connector's `err` port (there is no one to send it to), and the
rest of the batch is delivered.

After a peer ends its side of a connection, replies can still be sent on it
for `REPLY_LINGER_S` (10 s), then it is closed. Accepting, streams, replies and
closing are `StreamServer`'s (shared with `unix_socket_server` and `ws_server`).

Reconnects: a server has nothing to reconnect; if binding fails, `connect`
raises and the runtime retries by its `reconnect` policy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Mapping
from typing import Any

from contraflow.connectors.base import ConnectorContext, register
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.sockets import (
    ListenOptions,
    StreamLink,
    host_port_key,
    peer_of,
    stream_chunks,
    tune,
)
from contraflow.connectors.base.stream_server import Listener, StreamServer

# How long replies can still be sent on a connection after the peer stopped sending.
REPLY_LINGER_S = 10.0


@register("tcp_server")
class TcpServerConnector(StreamServer[ListenOptions]):
    config_keys = frozenset({"url", "buf_size", "backlog", "socket_options", "tls"})
    required_keys = frozenset({"url"})
    reply_linger_s = REPLY_LINGER_S

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self.socket = self.options.socket
        self._server: asyncio.Server | None = None

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> ListenOptions:
        return ListenOptions.read(cfg)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def _listen(self) -> Listener:
        url, tls = self.socket.url, self.options.tls
        self._server = await asyncio.start_server(
            self._accept,
            url.host,
            url.port,
            backlog=self.options.backlog,
            reuse_port=self.socket.reuse_port or None,
            limit=self.socket.buf_size,
            ssl=self.tls_context,
        )
        self.ctx.logger.info("listening on %s:%d%s", url.host, self.port, " (TLS)" if tls else "")
        return self._server

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tune(writer, self.socket.no_delay)
        address = peer_of(writer)
        meta = {"tcp_server": {"tls": self.options.tls is not None, "peer": address}}
        link = StreamLink(writer, f"the connection from {address['host']}:{address['port']}")
        chunks = stream_chunks(reader, self.socket.buf_size, meta)
        await self._serve(self.next_stream(), (address["host"], address["port"]), link, meta, chunks)

    def peer_key(self, meta: Mapping[str, Any]) -> Hashable | None:
        return host_port_key(meta)
