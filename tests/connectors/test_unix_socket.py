"""unix_socket_server and unix_socket_client on real unix domain sockets (asyncio's streams as the peers)."""

from __future__ import annotations

import asyncio
import socket
import stat
from pathlib import Path

import pytest

from contraflow.connectors.base import ConnectionLost, ConnectorConfigError
from contraflow.connectors.unix_socket_client import UnixSocketClientConnector
from contraflow.connectors.unix_socket_server import UnixSocketServerConnector, parse_mode
from tests.connectors.support import frames_by_stream, make, run, sink_event


def test_server_streams_each_connection_replies_by_peer_and_sets_permissions(tmp_path: Path) -> None:
    path = tmp_path / "server.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))  # a socket file left behind by an earlier run is replaced
    stale.close()

    async def body() -> None:
        conn = make("unix_socket_server", {"path": str(path), "permissions": "=600", "buf_size": 8})
        assert isinstance(conn, UnixSocketServerConnector)
        await conn.connect()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        ra, wa = await asyncio.open_unix_connection(path)
        rb, wb = await asyncio.open_unix_connection(path)
        wa.write(b'{"from":"a"}\n{"from":"a","n":2}\n')  # 8-byte reads split the lines
        wb.write(b'{"from":"b"}\n')
        await wa.drain()
        await wb.drain()
        frames = await frames_by_stream(conn, 3)
        assert sorted(frames.values()) == [[b'{"from":"a"}', b'{"from":"a","n":2}'], [b'{"from":"b"}']]
        wb.write(b"ping\n")
        item = await conn.pull()
        assert item is not None and item.meta is not None
        assert item.meta == {"unix_socket_server": {"path": str(path), "peer": item.stream}}
        await conn.send([sink_event("pong", item.meta, frames=[b"pong\n"])])
        assert await asyncio.wait_for(rb.readline(), 2) == b"pong\n"
        assert ra._buffer == b""  # type: ignore[attr-defined]  # nothing leaked to a
        wb.close()
        await wa.drain()
        wa.close()
        while (item := await conn.pull()) is not None and not item.end_stream:
            pass
        await conn.close()
        assert not path.exists()

    run(body())


def test_client_talks_to_a_server_and_reconnects_after_it_went_away(tmp_path: Path) -> None:
    path = tmp_path / "peer.sock"
    accepted: list[asyncio.StreamWriter] = []

    async def upper(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        while data := await reader.read(1024):
            writer.write(data.upper())
            await writer.drain()
        writer.close()

    async def body() -> None:
        conn = make("unix_socket_client", {"path": str(path), "buf_size": 1024})
        assert isinstance(conn, UnixSocketClientConnector)
        with pytest.raises(ConnectionLost, match="cannot connect"):
            await conn.connect()  # nothing there yet
        server = await asyncio.start_unix_server(upper, path)
        await conn.connect()
        first = conn._stream
        await conn.send([sink_event("a", frames=[b"hello\n"]), sink_event("b", frames=[b"world\n"])])
        got = b""
        while got.count(b"\n") < 2:
            item = await conn.pull()
            assert item is not None and item.meta == {"unix_socket_client": {"peer": str(path)}}
            got += item.data or b""
        assert got == b"HELLO\nWORLD\n"
        server.close()
        await server.wait_closed()
        path.unlink()
        accepted[0].close()  # the server goes away, with our connection
        with pytest.raises(ConnectionLost):
            while True:
                await conn.pull()
        with pytest.raises(ConnectionLost):
            await conn.send([sink_event("c")])
        server = await asyncio.start_unix_server(upper, path)
        await conn.connect()
        assert conn.connected and conn._stream != first
        await conn.close()
        server.close()

    run(body())


@pytest.mark.parametrize(
    ("text", "mode"),
    [("=600", 0o600), ("640", 0o640), ("u=rw,g=r", 0o640), ("a=rw,o-w", 0o664), ("x=1", None)],
)
def test_permissions_are_chmod_modes(text: str, mode: int | None) -> None:
    assert parse_mode(text) == mode


@pytest.mark.parametrize(
    ("kind", "config", "message"),
    [
        ("unix_socket_server", {}, "missing config key 'path'"),
        (
            "unix_socket_server",
            {"path": "/tmp/s", "permissions": "rw"},
            "config key 'permissions' must be a file mode",
        ),
        ("unix_socket_client", {"path": "/tmp/s", "url": "x"}, "unknown config key 'url'"),
    ],
)
def test_config_errors(kind: str, config: dict, message: str) -> None:
    cls = UnixSocketServerConnector if kind == "unix_socket_server" else UnixSocketClientConnector
    with pytest.raises(ConnectorConfigError, match=message):
        cls.check_config("c", config)
