"""What the socket connectors share: Tremor's `buf_size` and `socket_options`, and one stream
connection (TCP, TLS over TCP, a unix socket) as chunks read and frames written (`StreamLink`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contraflow.connectors.base import ConnectionLost, SinkEvent, reason_of
from contraflow.connectors.base.netaddr import Endpoint, endpoint
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.tls import ClientTls, ServerTls, client_tls, server_tls

# SO_REUSEADDR is accepted for Tremor's files; listeners here always set it (asyncio's default).
SOCKET_OPTIONS = frozenset({"TCP_NODELAY", "SO_REUSEPORT", "SO_REUSEADDR"})
UDP_SOCKET_OPTIONS = frozenset({"SO_REUSEPORT"})


@dataclass(frozen=True)
class SocketOptions:
    url: Endpoint
    buf_size: int
    no_delay: bool
    reuse_port: bool

    @classmethod
    def read(cls, cfg: ConfigReader, scheme: str = "tcp") -> SocketOptions:
        sub = socket_options(cfg, SOCKET_OPTIONS)
        sub.boolean("SO_REUSEADDR", True)
        # Tremor 0.12's clients say `no_delay` at the top level; later ones `socket_options.TCP_NODELAY`.
        no_delay = cfg.boolean("no_delay", sub.boolean("TCP_NODELAY", True))
        return cls(
            endpoint(cfg, scheme=scheme),
            cfg.integer("buf_size", 8192, minimum=1),
            no_delay,
            sub.boolean("SO_REUSEPORT", False),
        )


@dataclass(frozen=True)
class ListenOptions:
    """A TCP server's (`tcp_server`, `ws_server`): its socket, `backlog` and `tls`."""

    socket: SocketOptions
    backlog: int
    tls: ServerTls | None

    @classmethod
    def read(cls, cfg: ConfigReader, scheme: str = "tcp") -> ListenOptions:
        socket = SocketOptions.read(cfg, scheme)
        return cls(socket, cfg.integer("backlog", 128, minimum=1), server_tls(cfg))


@dataclass(frozen=True)
class ConnectOptions:
    """A TCP client's (`tcp_client`, `ws_client`): its socket and `tls` (on by default for `wss://`)."""

    socket: SocketOptions
    tls: ClientTls | None

    @classmethod
    def read(cls, cfg: ConfigReader, scheme: str = "tcp") -> ConnectOptions:
        socket = SocketOptions.read(cfg, scheme)
        return cls(socket, client_tls(cfg, socket.url.host, default=socket.url.scheme == "wss"))


def host_port_key(meta: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """`{"peer": {"host", "port"}}` -> (host, port): how tcp and ws servers name a connection."""
    peer = meta.get("peer")
    return (peer.get("host"), peer.get("port")) if isinstance(peer, dict) else None


def socket_options(cfg: ConfigReader, known: frozenset[str]) -> ConfigReader:
    """The `socket_options` record (Tremor's), read like a config of its own; unknown options are errors."""
    options = cfg.record("socket_options")
    for key in options:
        if key not in known:
            names = ", ".join(sorted(known))
            raise cfg.error("socket_options", f"has an unknown option '{key}' (known: {names})")
    return ConfigReader(cfg.alias, cfg.kind, options)


def udp_reuse_port(cfg: ConfigReader) -> bool:
    """Tremor's UDP `socket_options`: `SO_REUSEPORT` (default false), several sockets on one port."""
    return socket_options(cfg, UDP_SOCKET_OPTIONS).boolean("SO_REUSEPORT", False)


def tune(transport: asyncio.BaseTransport | asyncio.StreamWriter, no_delay: bool) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if no_delay else 0)


def peer_of(transport: asyncio.BaseTransport | asyncio.StreamWriter) -> dict[str, Any]:
    peer = transport.get_extra_info("peername") or ("", 0)
    return {"host": str(peer[0]), "port": int(peer[1])}


async def write(writer: asyncio.StreamWriter, data: bytes, what: str) -> None:
    """Write and drain (the peer's receive window is our back-pressure); a dead peer is ConnectionLost."""
    if writer.is_closing():
        raise ConnectionLost(f"{what} is closed")
    try:
        writer.write(data)
        await writer.drain()
    except (ConnectionError, OSError) as err:
        raise ConnectionLost(f"{what}: {reason_of(err)}") from err


async def close_writer(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError, OSError, TimeoutError):
        async with asyncio.timeout(2.0):  # not wait_for, which may swallow a cancel (3.11)
            await writer.wait_closed()


async def stream_chunks(
    reader: asyncio.StreamReader, buf_size: int, meta: dict[str, Any]
) -> AsyncIterator[tuple[bytes, dict[str, Any]]]:
    """What a stream connection reads, up to `buf_size` bytes at a time, until it ends or breaks."""
    while True:
        try:
            data = await reader.read(buf_size)
        except (ConnectionError, OSError):
            return
        if not data:
            return
        yield data, meta


class StreamLink:
    """The sending side of one stream connection: the events' frames are written back to back, at once."""

    def __init__(self, writer: asyncio.StreamWriter, what: str) -> None:
        self.writer = writer
        self.what = what

    def is_closing(self) -> bool:
        return self.writer.is_closing()

    async def send(self, events: Sequence[SinkEvent]) -> None:
        await write(self.writer, b"".join(f for e in events for f in e.frames), self.what)

    async def close(self) -> None:
        await close_writer(self.writer)
