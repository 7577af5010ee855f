"""tcp_server and tcp_client on real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio

import pytest

from contraflow.connectors.base import ConnectionLost, ConnectorConfigError, SourceData
from contraflow.connectors.tcp_client import TcpClientConnector
from contraflow.connectors.tcp_server import TcpServerConnector
from tests.connectors.support import eventually, frames_by_stream, make, run, sink_event


def server() -> TcpServerConnector:
    conn = make("tcp_server", {"url": "127.0.0.1:0", "buf_size": 16})
    assert isinstance(conn, TcpServerConnector)
    return conn


def test_server_frames_each_connection_separately_across_reads() -> None:
    async def body() -> None:
        conn = server()
        await conn.connect()
        _, a = await asyncio.open_connection("127.0.0.1", conn.port)
        _, b = await asyncio.open_connection("127.0.0.1", conn.port)
        # Interleaved halves of lines on two connections; 16-byte reads split lines across pulls.
        a.write(b'{"from":"a","n":1,"pad":"xxxxxxxx"}\n{"from":"a",')
        b.write(b'{"from":"b","n":1}\n{"from":"b","n":')
        await a.drain()
        await b.drain()
        await asyncio.sleep(0.05)
        a.write(b'"n":2}\n')
        b.write(b"2}\n")
        await a.drain()
        await b.drain()
        frames = await frames_by_stream(conn, 4)
        assert sorted(frames.values()) == [
            [b'{"from":"a","n":1,"pad":"xxxxxxxx"}', b'{"from":"a","n":2}'],
            [b'{"from":"b","n":1}', b'{"from":"b","n":2}'],
        ]
        a.close()
        b.close()
        await conn.close()

    run(body())


def test_server_replies_on_the_connection_the_event_came_from() -> None:
    async def body() -> None:
        conn = server()
        await conn.connect()
        ra, wa = await asyncio.open_connection("127.0.0.1", conn.port)
        rb, wb = await asyncio.open_connection("127.0.0.1", conn.port)
        wb.write(b"from b\n")
        await wb.drain()
        item = await conn.pull()
        assert item is not None and item.data == b"from b\n"
        assert item.meta is not None
        assert item.meta["tcp_server"]["peer"]["port"] == wb.get_extra_info("sockname")[1]
        # The pipeline's reply carries the request's metadata back to the sink side.
        await conn.send([sink_event("echo", dict(item.meta), frames=[b"echo b\n"])])
        assert await asyncio.wait_for(rb.readline(), 2) == b"echo b\n"
        await conn.send([sink_event("nowhere", {"stream": item.stream}, frames=[b"x\n"])])
        error = await conn.pull()  # no $tcp_server.peer: an error event on this connector's err port
        assert error is not None and error.port == "err" and error.events is not None
        assert (
            "no $tcp_server.peer" in error.events[0][0]["error"] and error.events[0][0]["event"] == "nowhere"
        )
        wa.write(b"from a\n")
        await wa.drain()
        assert (await conn.pull()).data == b"from a\n"  # type: ignore[union-attr]
        assert not ra.at_eof() and ra._buffer == b""  # type: ignore[attr-defined]  # nothing leaked to a
        wa.close()
        wb.close()
        await conn.close()

    run(body())


def test_reply_to_a_closed_connection_is_an_error_event_and_the_rest_is_delivered() -> None:
    async def body() -> None:
        conn = server()
        await conn.connect()
        _, gone = await asyncio.open_connection("127.0.0.1", conn.port)
        reader, stays = await asyncio.open_connection("127.0.0.1", conn.port)
        metas = []
        for writer in (gone, stays):
            writer.write(b"hi\n")
            await writer.drain()
            item = await conn.pull()
            assert item is not None and item.meta is not None
            metas.append(item.meta)
        gone.close()
        end = await conn.pull()
        assert end is not None and end.end_stream
        sent = 0
        while conn.inbox.empty() and sent < 50:  # the kernel may take a write or two before the reset shows
            await conn.send(
                [
                    sink_event("late", dict(metas[0]), frames=[b"late\n" * 1000]),
                    sink_event("fine", dict(metas[1]), frames=[b"fine\n"]),
                ]
            )
            sent += 1
            await asyncio.sleep(0.01)
        error = await conn.pull()
        assert error is not None and error.port == "err" and error.events is not None
        peer = metas[0]["tcp_server"]["peer"]
        assert f"the connection from {peer['host']}:{peer['port']}" in error.events[0][0]["error"]
        assert error.events[0][1]["tcp_server"] == metas[0]["tcp_server"]  # the event's own metadata
        for _ in range(sent):  # every reply to the connection that stayed was written
            assert await asyncio.wait_for(reader.readline(), 2) == b"fine\n"
        stays.close()
        await conn.close()

    run(body())


def test_pull_returns_none_when_the_flow_quiesces() -> None:
    async def body() -> None:
        conn = server()
        await conn.connect()
        waiter = asyncio.create_task(conn.pull())
        await asyncio.sleep(0.05)
        assert not waiter.done()  # waits for data, does not spin
        conn.ctx.quiescing.set()
        assert await asyncio.wait_for(waiter, 1) is None
        await conn.close()

    run(body())


async def echo_server() -> asyncio.Server:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data.upper())
            await writer.drain()
        writer.close()

    return await asyncio.start_server(echo, "127.0.0.1", 0)


def test_client_sends_and_reads_responses() -> None:
    async def body() -> None:
        srv = await echo_server()
        port = srv.sockets[0].getsockname()[1]
        conn = make("tcp_client", {"url": f"127.0.0.1:{port}"})
        await conn.connect()
        await conn.send([sink_event("a", frames=[b"hello\n"]), sink_event("b", frames=[b"world\n"])])
        got = b""
        while got.count(b"\n") < 2:
            item = await conn.pull()
            assert item is not None and item.data is not None
            assert item.meta == {"tcp_client": {"tls": False, "peer": {"host": "127.0.0.1", "port": port}}}
            got += item.data
        assert got == b"HELLO\nWORLD\n"
        await conn.close()
        srv.close()

    run(body())


def test_client_reports_connection_lost_and_reconnects() -> None:
    async def body() -> None:
        srv = await echo_server()
        port = srv.sockets[0].getsockname()[1]
        conn = make("tcp_client", {"url": f"127.0.0.1:{port}"})
        assert isinstance(conn, TcpClientConnector)
        await conn.connect()
        first_stream = conn._stream
        srv.close()
        await srv.wait_closed()
        await conn.close()
        with pytest.raises(ConnectionLost):
            await conn.connect()  # refused: nobody listens any more
        with pytest.raises(ConnectionLost):
            await conn.send([sink_event("x")])
        srv2 = await asyncio.start_server(lambda r, w: None, "127.0.0.1", port)
        await conn.connect()
        assert conn.connected and conn._stream != first_stream  # a new stream for fresh framing
        await conn.close()
        srv2.close()

    run(body())


def test_client_pull_raises_connection_lost_after_the_server_closes() -> None:
    async def body() -> None:
        async def hello_and_bye(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"bye\n")
            await writer.drain()
            writer.close()

        srv = await asyncio.start_server(hello_and_bye, "127.0.0.1", 0)
        conn = make("tcp_client", {"url": f"127.0.0.1:{srv.sockets[0].getsockname()[1]}"})
        await conn.connect()
        items: list[SourceData] = []
        with pytest.raises(ConnectionLost):
            while True:
                item = await conn.pull()
                assert item is not None
                items.append(item)
        assert b"".join(i.data or b"" for i in items) == b"bye\n"
        assert items[-1].end_stream
        await conn.close()
        srv.close()

    run(body())


@pytest.mark.parametrize(
    ("kind", "config", "message"),
    [
        ("tcp_server", {}, "connector 'c' (tcp_server): missing config key 'url'"),
        ("tcp_server", {"url": "127.0.0.1"}, "config key 'url' must be host:port"),
        ("tcp_server", {"url": "127.0.0.1:99999"}, "config key 'url' has an invalid port"),
        ("tcp_client", {"url": "h:1", "buf": 1}, "unknown config key 'buf'"),
        ("tcp_client", {"url": "h:1", "socket_options": {"NODELAY": True}}, "unknown option 'NODELAY'"),
    ],
)
def test_config_errors(kind: str, config: dict, message: str) -> None:
    cls = TcpServerConnector if kind == "tcp_server" else TcpClientConnector
    with pytest.raises(ConnectorConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cls.check_config("c", config)


def test_server_pushes_back_on_a_peer_while_the_flow_does_not_pull() -> None:
    async def body() -> None:
        conn = make("tcp_server", {"url": "127.0.0.1:0", "buf_size": 4096})
        assert isinstance(conn, TcpServerConnector)
        await conn.connect()
        _, writer = await asyncio.open_connection("127.0.0.1", conn.port)
        payload = b"x" * (32 << 20)  # far more than the bounded inbox plus the kernel's buffers
        writer.write(payload)
        draining = asyncio.create_task(writer.drain())
        await asyncio.sleep(0.3)
        assert not draining.done()  # nobody pulls: the server stopped reading, TCP holds the peer back
        received = 0
        while received < len(payload):
            item = await conn.pull()
            assert item is not None
            received += len(item.data or b"")
        await asyncio.wait_for(draining, 10)
        assert received == len(payload)
        writer.close()
        await conn.close()

    run(body(), timeout=60)


def test_client_without_out_drops_replies_and_still_notices_the_close() -> None:
    async def body() -> None:
        async def reply_and_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            data = await reader.readexactly(100_000)
            writer.write(data)
            await writer.drain()
            writer.close()

        srv = await asyncio.start_server(reply_and_close, "127.0.0.1", 0)
        conn = make(
            "tcp_client", {"url": f"127.0.0.1:{srv.sockets[0].getsockname()[1]}"}, outputs=frozenset()
        )
        assert isinstance(conn, TcpClientConnector)
        await conn.connect()
        await conn.send([sink_event("a", frames=[b"x" * 100_000])])  # echoed back, read and dropped
        await eventually(lambda: not conn.connected)  # the server's close is seen without anyone pulling
        assert conn.inbox.empty()
        with pytest.raises(ConnectionLost):
            await conn.send([sink_event("b")])
        await conn.close()
        srv.close()

    run(body())
