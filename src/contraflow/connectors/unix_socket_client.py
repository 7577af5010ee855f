"""`unix_socket_client`: one connection to a unix domain socket; events are written to it and
what comes back is read as events.

Config (Tremor's): `path` (an existing socket, required), `buf_size` (bytes per
read, default 8192). Incoming events carry `$unix_socket_client = {"peer": path}`.
Connecting, reading, writing and reconnecting (the breaker while the socket is
gone) are `StreamClient`'s, as for `tcp_client`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from contraflow.connectors.base import ConnectionLost, register
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.sockets import StreamLink, stream_chunks
from contraflow.connectors.base.stream_client import Opened, StreamClient


@dataclass(frozen=True)
class UnixClientOptions:
    path: str
    buf_size: int


@register("unix_socket_client")
class UnixSocketClientConnector(StreamClient[UnixClientOptions]):
    config_keys = frozenset({"path", "buf_size"})
    required_keys = frozenset({"path"})

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> UnixClientOptions:
        return UnixClientOptions(cfg.string("path"), cfg.integer("buf_size", 8192, minimum=1))

    @property
    def peer(self) -> str:
        return self.options.path

    async def _open(self) -> Opened:
        path, buf_size = self.options.path, self.options.buf_size
        try:
            reader, writer = await asyncio.open_unix_connection(path, limit=buf_size)
        except OSError as err:
            raise ConnectionLost(f"cannot connect to {path}: {err.strerror or err}") from err
        meta = {"unix_socket_client": {"peer": path}}
        return Opened(stream_chunks(reader, buf_size, meta), StreamLink(writer, path), meta)
