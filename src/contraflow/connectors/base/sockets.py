"""Socket settings shared by the TCP and UDP connectors (Tremor's `buf_size`, `socket_options`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contraflow.connectors.base import ConnectionLost, reason_of
from contraflow.connectors.base.netaddr import Endpoint, endpoint
from contraflow.connectors.base.options import ConfigReader

SOCKET_OPTIONS = frozenset({"TCP_NODELAY", "SO_REUSEPORT"})


@dataclass(frozen=True)
class SocketOptions:
    url: Endpoint
    buf_size: int
    no_delay: bool
    reuse_port: bool

    @classmethod
    def read(cls, alias: str, kind: str, config: Mapping[str, Any]) -> SocketOptions:
        cfg = ConfigReader(alias, kind, config)
        options = cfg.record("socket_options")
        for key in options:
            if key not in SOCKET_OPTIONS:
                raise cfg.error(
                    "socket_options", f"has an unknown option '{key}' (known: TCP_NODELAY, SO_REUSEPORT)"
                )
        sub = ConfigReader(alias, kind, options)
        return cls(
            endpoint(cfg),
            cfg.integer("buf_size", 8192, minimum=1),
            sub.boolean("TCP_NODELAY", True),
            sub.boolean("SO_REUSEPORT", False),
        )


def tune(writer: asyncio.StreamWriter, options: SocketOptions) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if options.no_delay else 0)


def peer_of(writer: asyncio.StreamWriter) -> dict[str, Any]:
    peer = writer.get_extra_info("peername") or ("", 0)
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
        await asyncio.wait_for(writer.wait_closed(), 2.0)
