"""`ws_server`: a WebSocket server; each connection is one stream of events, and replies go back on it.

Config (Tremor's): `url` (`"host:port"` or `"ws://host:port"`, required),
`backlog` (default 128), `socket_options` (`TCP_NODELAY` default true,
`SO_REUSEPORT` default false, `SO_REUSEADDR`), `tls` (`{"cert", "key"}`, optional
`"cafile"` to require client certificates: `contraflow.connectors.base.tls`).

Each message is a chunk of its connection's stream (`base.websocket`). Events
carry `$ws_server = {"tls": bool, "peer": {"host", "port"}}` (plus
`"binary": true` for binary messages); an event on `in` goes to the connection
its `$ws_server.peer` names, one message per frame. Accepting, streams,
back-pressure (websockets stops reading a connection whose messages are not
taken), replies (and error events for replies to closed connections) and
closing are `StreamServer`'s, as for `tcp_server`.
"""

from __future__ import annotations

import socket
from collections.abc import Hashable, Mapping
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve

from contraflow.connectors.base import ConnectionLost, ConnectorContext, register
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.sockets import ListenOptions, host_port_key, peer_of, tune
from contraflow.connectors.base.stream_server import Listener, StreamServer
from contraflow.connectors.base.websocket import OPTIONS, WsLink, messages
from contraflow.connectors.base.ws_frames import server_connection


@register("ws_server")
class WsServerConnector(StreamServer[ListenOptions]):
    config_keys = frozenset({"url", "backlog", "socket_options", "tls"})
    required_keys = frozenset({"url"})

    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self._server: Server | None = None

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> ListenOptions:
        return ListenOptions.read(cfg, scheme="ws")

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        assert self._server is not None
        return int(next(iter(self._server.sockets)).getsockname()[1])

    async def _listen(self) -> Listener:
        url, tls, options = self.options.socket.url, self.options.tls, self.options
        try:
            self._server = await serve(
                self._accept,
                url.host,
                url.port,
                ssl=self.tls_context,
                backlog=options.backlog,
                reuse_port=options.socket.reuse_port or None,
                family=socket.AF_UNSPEC,
                create_connection=server_connection(self.inbox.joins),
                **OPTIONS,
            )
        except OSError as err:
            raise ConnectionLost(f"cannot listen on {url}: {err.strerror or err}") from err
        self.ctx.logger.info(
            "WebSocket server listening on %s:%d%s", url.host, self.port, " (TLS)" if tls else ""
        )
        return self._server

    async def _accept(self, ws: ServerConnection) -> None:
        tune(ws.transport, self.options.socket.no_delay)
        address = peer_of(ws.transport)
        meta = {"ws_server": {"tls": self.options.tls is not None, "peer": address}}
        link = WsLink(ws, "ws_server", f"the connection from {address['host']}:{address['port']}")
        key = (address["host"], address["port"])
        await self._serve(self.next_stream(), key, link, meta, messages(ws, "ws_server", meta))

    def peer_key(self, meta: Mapping[str, Any]) -> Hashable | None:
        return host_port_key(meta)
