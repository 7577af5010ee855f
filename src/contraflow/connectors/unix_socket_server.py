"""`unix_socket_server`: listens on a unix domain socket; each connection is one stream, and replies go back on it.

Config (Tremor's): `path` (the socket file, required: created, and replaced if
something is there already), `permissions` (the socket file's mode, e.g.
`"=600"`, `"600"` or `"u=rw,g=r"`; default: the umask's), `buf_size` (bytes per
read, default 8192).

Events carry `$unix_socket_server = {"path", "peer": <connection id>}`; an
event on `in` goes to the connection its `$unix_socket_server.peer` names.
Accepting, streams, back-pressure, replies (and error events for replies to
closed connections) and closing are `StreamServer`'s, as for `tcp_server`. The
socket file is removed when the connector closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contraflow.connectors.base import ConnectionLost, register
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.sockets import StreamLink, stream_chunks
from contraflow.connectors.base.stream_server import Listener, StreamServer
from contraflow.connectors.tcp_server import REPLY_LINGER_S

_WHO = {"u": stat.S_IRWXU, "g": stat.S_IRWXG, "o": stat.S_IRWXO}
_WHAT = {"r": 0o444, "w": 0o222, "x": 0o111}


@dataclass(frozen=True)
class UnixServerOptions:
    path: str
    permissions: int | None
    buf_size: int

    @classmethod
    def read(cls, cfg: ConfigReader) -> UnixServerOptions:
        raw = cfg.string("permissions") if cfg.config.get("permissions") is not None else None
        mode = None if raw is None else parse_mode(raw)
        if raw is not None and mode is None:
            raise cfg.error(
                "permissions", f'must be a file mode such as "=600", "600" or "u=rw,g=r", got {raw!r}'
            )
        return cls(cfg.string("path"), mode, cfg.integer("buf_size", 8192, minimum=1))


def parse_mode(text: str) -> int | None:
    """A chmod-style mode: octal (`600`, `=600`) or symbolic clauses (`u=rw,go=`); None if neither."""
    octal = text.removeprefix("=")
    if octal and all(c in "01234567" for c in octal):
        return int(octal, 8)
    mode = 0
    for clause in text.split(","):
        who, op, what = _split_clause(clause)
        if op is None or any(c not in _WHAT for c in what):
            return None
        mask = sum(_WHO[c] for c in who or "ugo")
        bits = sum(_WHAT[c] for c in what) & mask
        mode = (mode & ~mask) | bits if op == "=" else mode | bits if op == "+" else mode & ~bits
    return mode


def _split_clause(clause: str) -> tuple[str, str | None, str]:
    for i, c in enumerate(clause):
        if c in "=+-":
            who = clause[:i].replace("a", "ugo")
            return (who, c, clause[i + 1 :]) if all(w in _WHO for w in who) else ("", None, "")
    return "", None, ""


@register("unix_socket_server")
class UnixSocketServerConnector(StreamServer[UnixServerOptions]):
    config_keys = frozenset({"path", "permissions", "buf_size"})
    required_keys = frozenset({"path"})
    reply_linger_s = REPLY_LINGER_S

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> UnixServerOptions:
        return UnixServerOptions.read(cfg)

    async def _listen(self) -> Listener:
        path = Path(self.options.path)
        try:
            if path.is_socket():
                path.unlink()  # a previous run's socket: nobody can be listening on it through us
            server = await asyncio.start_unix_server(self._accept, path, limit=self.options.buf_size)
            if self.options.permissions is not None:
                os.chmod(path, self.options.permissions)
        except OSError as err:
            raise ConnectionLost(f"cannot listen on {path}: {err.strerror or err}") from err
        self.ctx.logger.info("listening on %s", path)
        return server

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = self.next_stream()
        meta = {"unix_socket_server": {"path": self.options.path, "peer": stream}}
        link = StreamLink(writer, f"connection {stream} on {self.options.path}")
        await self._serve(stream, stream, link, meta, stream_chunks(reader, self.options.buf_size, meta))

    def peer_key(self, meta: Mapping[str, Any]) -> Hashable | None:
        peer = meta.get("peer")
        return peer if isinstance(peer, int) and not isinstance(peer, bool) else None

    async def close(self) -> None:
        await super().close()
        with contextlib.suppress(OSError):
            if Path(self.options.path).is_socket():
                os.unlink(self.options.path)
