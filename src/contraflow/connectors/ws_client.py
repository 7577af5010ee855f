"""`ws_client`: one WebSocket connection; events are sent on it and the messages that come back are events.

Config (Tremor's): `url` (`"ws://host:port/path"` or `"wss://..."`, required),
`socket_options` (`TCP_NODELAY` default true), `no_delay` (Tremor 0.12's
spelling), `tls` (`true`, or `{"cafile", "domain", "cert", "key"}`; on by default
for `wss://`: `contraflow.connectors.base.tls`).

Each frame an event was encoded to is one message; each message received is a
chunk of the connection's stream (`base.websocket`), with
`$ws_client = {"tls": bool, "peer": {"host", "port"}}` (plus `"binary": true`
for binary messages). Connecting, reading, writing and reconnecting (the
breaker while the server is away) are `StreamClient`'s, as for `tcp_client`.
"""

from __future__ import annotations

from urllib.parse import urlunsplit

from websockets.asyncio.client import connect
from websockets.exceptions import InvalidHandshake, InvalidURI

from contraflow.connectors.base import ConnectionLost, register
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.sockets import ConnectOptions, tune
from contraflow.connectors.base.stream_client import Opened, StreamClient
from contraflow.connectors.base.websocket import OPTIONS, WsLink, messages
from contraflow.connectors.base.ws_frames import client_connection

# How long the TCP connect, TLS and WebSocket handshakes may take together.
OPEN_TIMEOUT_S = 10.0


@register("ws_client")
class WsClientConnector(StreamClient[ConnectOptions]):
    config_keys = frozenset({"url", "socket_options", "no_delay", "tls"})
    required_keys = frozenset({"url"})

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> ConnectOptions:
        return ConnectOptions.read(cfg, scheme="ws")

    @property
    def peer(self) -> str:
        return self._uri

    @property
    def _uri(self) -> str:
        """The url to connect to: `wss://` whenever TLS is configured (websockets wants the two to agree)."""
        url = self.options.socket.url
        scheme = "wss" if self.options.tls else "ws"
        return urlunsplit((scheme, f"{_bracketed(url.host)}:{url.port}", url.path, "", ""))

    async def _open(self) -> Opened:
        tls = self.options.tls
        try:
            ws = await connect(
                self._uri,
                ssl=self.tls_context,
                server_hostname=tls.domain if tls else None,
                proxy=None,
                open_timeout=OPEN_TIMEOUT_S,
                create_connection=client_connection(self.inbox.joins),
                **OPTIONS,
            )
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as err:
            raise ConnectionLost(
                f"cannot connect to {self._uri}: {getattr(err, 'strerror', None) or err}"
            ) from err
        tune(ws.transport, self.options.socket.no_delay)
        host, port = ws.transport.get_extra_info("peername")[:2]
        meta = {"ws_client": {"tls": tls is not None, "peer": {"host": str(host), "port": int(port)}}}
        return Opened(messages(ws, "ws_client", meta), WsLink(ws, "ws_client", self._uri), meta)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
