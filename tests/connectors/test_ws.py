"""ws_server and ws_client against the `websockets` library on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from contraflow.connectors.base import ConnectionLost, ConnectorConfigError, SourceData
from contraflow.connectors.ws_client import WsClientConnector
from contraflow.connectors.ws_server import WsServerConnector
from tests.connectors.support import make, run, sink_event


async def started_server() -> WsServerConnector:
    conn = make("ws_server", {"url": "127.0.0.1:0"})
    assert isinstance(conn, WsServerConnector)
    await conn.connect()
    return conn


def test_server_streams_each_client_and_replies_on_its_connection() -> None:
    async def body() -> None:
        conn = await started_server()
        url = f"ws://127.0.0.1:{conn.port}/"
        async with connect(url) as a, connect(url) as b:

            async def pulled(sent: str | bytes, by: object) -> SourceData:
                await by.send(sent)  # type: ignore[attr-defined]
                item = await asyncio.wait_for(conn.pull(), 2)
                assert item is not None and item.data == (sent if isinstance(sent, bytes) else sent.encode())
                return item

            a1 = await pulled('{"from":"a","n":1}\n{"from":', a)  # a line split over two messages
            b1 = await pulled(b'{"from":"b"}\n', b)  # a binary message
            a2 = await pulled('"a","n":2}\n', a)
            assert a1.stream == a2.stream != b1.stream  # one stream per connection, framed on its own
            assert a1.meta == {
                "ws_server": {"tls": False, "peer": {"host": "127.0.0.1", "port": a.local_address[1]}}
            }
            assert b1.meta is not None and b1.meta["ws_server"]["binary"] is True
            await conn.send([sink_event("echo", a1.meta, frames=[b"one\n", b"two\n"])])
            assert [await a.recv(), await a.recv()] == ["one\n", "two\n"]  # one text message per frame
            await conn.send([sink_event("raw", b1.meta, frames=[b"\xff"])])  # $ws_server.binary: binary
            assert await b.recv() == b"\xff"
            await conn.send([sink_event("lost", {"stream": a1.stream}, frames=[b"x\n"])])
            error = await conn.pull()  # no $ws_server.peer: an error event on the connector's err port
            assert error is not None and error.port == "err" and error.events is not None
            assert "no $ws_server.peer" in error.events[0][0]["error"]
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(b.recv(), 0.1)  # nothing leaked to b
        end = await asyncio.wait_for(conn.pull(), 2)
        assert end is not None and end.end_stream
        error = None
        while error is None or error.port != "err":  # the clients are gone: the reply is undeliverable
            await conn.send([sink_event("late", a1.meta, frames=[b"late\n"])])
            error = await asyncio.wait_for(conn.pull(), 2)
        assert error.events is not None and "is closed" in error.events[0][0]["error"]
        await conn.close()

    run(body())


@pytest.mark.parametrize("preprocessors", [["separate"], []])
def test_messages_waiting_are_joined_only_before_a_framing_preprocessor(preprocessors: list[str]) -> None:
    async def body() -> None:
        conn = make("ws_server", {"url": "127.0.0.1:0"}, preprocessors=preprocessors)
        assert isinstance(conn, WsServerConnector)
        await conn.connect()
        lines = [f'{{"n":{i}}}\n'.encode() for i in range(200)]
        async with connect(f"ws://127.0.0.1:{conn.port}/") as peer:
            for line in lines:
                await peer.send(line, text=True)
            await peer.send(b"binary\n")  # another meta: never joined to the text before it
            chunks = []
            while len(chunks) < 2 or chunks[-1].data != b"binary\n":
                item = await asyncio.wait_for(conn.pull(), 5)
                assert item is not None
                chunks.append(item)
        assert b"".join(c.data or b"" for c in chunks[:-1]) == b"".join(lines)
        if preprocessors:  # `separate` frames across chunks: what waited came in far fewer pulls
            assert len(chunks) - 1 < len(lines) // 4
        else:  # each message is an event of its own
            assert [c.data for c in chunks[:-1]] == lines
        await conn.close()

    run(body())


async def handshaken(port: int) -> tuple[ClientProtocol, asyncio.StreamReader, asyncio.StreamWriter]:
    """A WebSocket client on websockets' own protocol, writing raw bytes: the test chooses the reads."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    protocol = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}/"))
    protocol.send_request(protocol.connect())
    writer.write(b"".join(protocol.data_to_send()))
    while protocol.state is State.CONNECTING:
        protocol.receive_data(await reader.read(4096))
        protocol.events_received()
    assert protocol.state is State.OPEN
    return protocol, reader, writer


def test_server_cuts_frames_split_over_reads_and_leaves_pings_fragments_and_close_to_websockets() -> None:
    """The frames of a read are cut by `ws_frames`; a frame split over reads, a ping amid them (answered),
    a fragmented message (websockets' from then on) and the closing handshake keep every message, in order."""

    async def body() -> None:
        conn = await started_server()
        protocol, reader, writer = await handshaken(conn.port)
        lines = [f'{{"n":{i}}}\n'.encode() for i in range(60)]
        large = b'{"large":"' + b"x" * 300_000 + b'"}\n'

        async def write(wire: bytes, size: int) -> None:
            for start in range(0, len(wire), size):
                writer.write(wire[start : start + size])
                await writer.drain()
                await asyncio.sleep(0)

        for line in lines[:30]:
            protocol.send_text(line)
        protocol.send_ping(b"still there?")
        protocol.send_binary(b'{"binary":true}\n')
        for line in lines[30:40]:
            protocol.send_text(line)
        await write(b"".join(protocol.data_to_send()), 7)  # small writes: frames split over the reads
        protocol.send_text(large)  # one frame over many reads
        await write(b"".join(protocol.data_to_send()), 50_000)
        protocol.send_text(b'{"frag', fin=False)
        protocol.send_continuation(b'mented":1}\n', fin=True)
        for line in lines[40:]:
            protocol.send_text(line)
        await write(b"".join(protocol.data_to_send()), 7)
        expected = b"".join(lines[:30]) + b'{"binary":true}\n' + b"".join(lines[30:40]) + large
        expected += b'{"fragmented":1}\n' + b"".join(lines[40:])
        got: list[SourceData] = []
        while b"".join(i.data or b"" for i in got) != expected:
            item = await asyncio.wait_for(conn.pull(), 5)
            assert item is not None and not item.end_stream, b"".join(i.data or b"" for i in got)
            got.append(item)
        binary = [i.data for i in got if i.meta and i.meta["ws_server"].get("binary")]
        assert binary == [b'{"binary":true}\n']  # its own message, not joined to the text around it
        while not any(isinstance(e, Frame) and e.opcode is Opcode.PONG for e in protocol.events_received()):
            protocol.receive_data(await asyncio.wait_for(reader.read(4096), 5))
        protocol.send_close(1000)
        writer.write(b"".join(protocol.data_to_send()))
        while chunk := await asyncio.wait_for(reader.read(4096), 5):
            protocol.receive_data(chunk)
        assert protocol.close_rcvd is not None and protocol.close_rcvd.code == 1000  # a clean close
        writer.close()  # the server half-closed; the connection ends when the client closes its side
        end = await asyncio.wait_for(conn.pull(), 5)
        assert end is not None and end.end_stream
        await conn.close()

    run(body())


async def upper_echo(ws: ServerConnection) -> None:
    async for message in ws:
        await ws.send(message.upper())


def test_client_sends_messages_and_reads_what_comes_back() -> None:
    async def body() -> None:
        async with serve(upper_echo, "127.0.0.1", 0) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            conn = make("ws_client", {"url": f"ws://127.0.0.1:{port}/path", "no_delay": False})
            await conn.connect()
            await conn.send([sink_event("a", frames=[b"hello\n"]), sink_event("b", frames=[b"world\n"])])
            await conn.send([sink_event("c", {"ws_client": {"binary": True}}, frames=[b"bin\n"])])
            items = [await asyncio.wait_for(conn.pull(), 2) for _ in range(3)]
            assert [i.data for i in items if i] == [b"HELLO\n", b"WORLD\n", b"BIN\n"]
            peer = {"host": "127.0.0.1", "port": port}
            assert items[0] is not None and items[0].meta == {"ws_client": {"tls": False, "peer": peer}}
            assert items[2] is not None and items[2].meta == {
                "ws_client": {"tls": False, "peer": peer, "binary": True}
            }
            await conn.close()

    run(body())


def test_client_reports_connection_lost_and_reconnects_on_a_new_stream() -> None:
    async def body() -> None:
        server = await serve(upper_echo, "127.0.0.1", 0)
        port = next(iter(server.sockets)).getsockname()[1]
        conn = make("ws_client", {"url": f"127.0.0.1:{port}"})
        assert isinstance(conn, WsClientConnector)
        await conn.connect()
        first = conn._stream
        server.close()
        await server.wait_closed()
        with pytest.raises(ConnectionLost):
            while True:  # the close frame ends the stream, then pull says so
                item = await asyncio.wait_for(conn.pull(), 2)
                assert item is not None and item.end_stream
        with pytest.raises(ConnectionLost):
            await conn.send([sink_event("x")])
        with pytest.raises(ConnectionLost, match="cannot connect"):
            await conn.connect()  # refused while nobody listens
        async with serve(upper_echo, "127.0.0.1", port):
            await conn.connect()
            assert conn.connected and conn._stream != first
            await conn.send([sink_event("y", frames=[b"again\n"])])
            item = await asyncio.wait_for(conn.pull(), 2)
            assert item is not None and item.data == b"AGAIN\n" and item.stream == conn._stream
        await conn.close()

    run(body())


@pytest.mark.parametrize(
    ("kind", "config", "message"),
    [
        ("ws_server", {"url": "127.0.0.1:1", "buf_size": 1}, "unknown config key 'buf_size'"),
        (
            "ws_server",
            {"url": "127.0.0.1:1", "tls": {"cert": "c"}},
            "config key 'tls' needs 'cert' and 'key'",
        ),
        ("ws_server", {"url": "127.0.0.1:1", "tls": {"cert": "/nope", "key": "/nope"}}, "cannot use cert"),
        ("ws_client", {"url": "ws://h:1", "tls": {"ca": "x"}}, "unknown key 'ca'"),
        ("ws_client", {"url": "ws://h:1", "tls": {"cafile": "/nope"}}, "cannot use cafile '/nope'"),
        ("ws_client", {"url": "ws://h:1", "tls": "yes"}, "config key 'tls' must be true, false or a record"),
    ],
)
def test_config_errors(kind: str, config: dict, message: str) -> None:
    with pytest.raises(ConnectorConfigError, match=message.replace("(", r"\(")):
        make(kind, config)  # checks the config, then creates the connector (which reads the tls files)


def test_check_leaves_tls_files_to_the_deploy() -> None:
    """`contraflow check` passes Tremor's files whose certificates are made just before they run."""
    WsServerConnector.check_config("c", {"url": "127.0.0.1:1", "tls": {"cert": "/nope", "key": "/nope"}})
    WsClientConnector.check_config("c", {"url": "wss://h:1", "tls": {"cafile": "./before/localhost.cert"}})
