"""`tcp_client`: one TCP (or TLS) connection; events are written to it and what comes back is read as events.

Config (Tremor's): `url` (`"host:port"`, required), `buf_size` (default
8192), `socket_options` (`TCP_NODELAY` default true), `no_delay` (Tremor
0.12's spelling of `TCP_NODELAY`), `tls` (`true`, or `{"cafile", "domain",
"cert", "key"}`: `contraflow.connectors.base.tls`).

Incoming events carry `$tcp_client = {"tls": bool, "peer": {"host", "port"}}`.
Connecting, reading, writing and reconnecting are `StreamClient`'s (shared
with `unix_socket_client` and `ws_client`).
"""

from __future__ import annotations

import asyncio

from contraflow.connectors.base import ConnectionLost, register
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.sockets import ConnectOptions, StreamLink, stream_chunks, tune
from contraflow.connectors.base.stream_client import Opened, StreamClient


@register("tcp_client")
class TcpClientConnector(StreamClient[ConnectOptions]):
    config_keys = frozenset({"url", "buf_size", "socket_options", "no_delay", "tls"})
    required_keys = frozenset({"url"})

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> ConnectOptions:
        return ConnectOptions.read(cfg)

    @property
    def peer(self) -> str:
        return str(self.options.socket.url)

    async def _open(self) -> Opened:
        url, tls, buf_size = self.options.socket.url, self.options.tls, self.options.socket.buf_size
        try:
            reader, writer = await asyncio.open_connection(
                url.host,
                url.port,
                limit=buf_size,
                ssl=self.tls_context,
                server_hostname=tls.domain if tls else None,
            )
        except OSError as err:  # ssl.SSLError (a refused certificate) is an OSError too
            raise ConnectionLost(f"cannot connect to {url}: {err.strerror or err}") from err
        tune(writer, self.options.socket.no_delay)
        meta = {"tcp_client": {"tls": tls is not None, "peer": {"host": url.host, "port": url.port}}}
        return Opened(stream_chunks(reader, buf_size, meta), StreamLink(writer, str(url)), meta)
