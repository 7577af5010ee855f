"""udp_server and udp_client on real datagram sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket

import pytest

from contraflow.connectors.base import ConnectionLost, ConnectorConfigError
from contraflow.connectors.udp_server import UdpServerConnector
from tests.connectors.support import make, run, sink_event


def test_client_datagrams_arrive_at_the_server_one_stream_each() -> None:
    async def body() -> None:
        srv = make("udp_server", {"url": "127.0.0.1:0"})
        assert isinstance(srv, UdpServerConnector)
        await srv.connect()
        client = make("udp_client", {"url": f"127.0.0.1:{srv.port}"})
        await client.connect()
        await client.send([sink_event("a", frames=[b"one"]), sink_event("b", frames=[b"two", b"three"])])
        items = [await srv.pull() for _ in range(3)]
        assert [i.data for i in items if i is not None] == [b"one", b"two", b"three"]
        # Each datagram is its own stream, ended with its data (a `separate` chain flushes it).
        assert all(i is not None and i.end_stream for i in items)
        assert len({i.stream for i in items if i is not None}) == 3
        first = items[0]
        assert first is not None and first.meta is not None
        assert first.meta["udp_server"]["peer"]["host"] == "127.0.0.1"
        await client.close()
        await srv.close()

    run(body())


def test_server_truncates_to_buf_size() -> None:
    async def body() -> None:
        srv = make("udp_server", {"url": "127.0.0.1:0", "buf_size": 4})
        assert isinstance(srv, UdpServerConnector)
        await srv.connect()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"abcdefgh", ("127.0.0.1", srv.port))
        item = await srv.pull()
        assert item is not None and item.data == b"abcd"
        await srv.close()

    run(body())


def test_client_to_a_closed_port_is_connection_lost() -> None:
    async def body() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        client = make("udp_client", {"url": f"127.0.0.1:{port}"})
        await client.connect()
        with pytest.raises(ConnectionLost):
            for _ in range(20):  # the refusal (ICMP) arrives after the first datagram
                await client.send([sink_event("x", frames=[b"ping"])])
                await asyncio.sleep(0.01)
        await client.close()

    run(body())


def test_client_sends_from_its_bind_address() -> None:
    async def body() -> None:
        srv = make("udp_server", {"url": "127.0.0.1:0"})
        assert isinstance(srv, UdpServerConnector)
        await srv.connect()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("127.0.0.1", 0))
            local = probe.getsockname()[1]
        client = make("udp_client", {"url": f"127.0.0.1:{srv.port}", "bind": f"127.0.0.1:{local}"})
        await client.connect()
        await client.send([sink_event("a", frames=[b"hello"])])
        item = await srv.pull()
        assert item is not None and item.meta is not None
        assert item.meta["udp_server"]["peer"] == {"host": "127.0.0.1", "port": local}
        await client.close()
        await srv.close()

    run(body())


def test_so_reuseport_lets_two_servers_share_a_port_and_a_client_bind_it_too() -> None:
    reuse = {"SO_REUSEPORT": True}

    async def body() -> None:
        first = make("udp_server", {"url": "127.0.0.1:0", "socket_options": reuse})
        assert isinstance(first, UdpServerConnector)
        await first.connect()
        url = f"127.0.0.1:{first.port}"
        second = make("udp_server", {"url": url, "socket_options": reuse})
        await second.connect()  # Tremor's udp-reuseport test: two servers on one port
        without = make("udp_server", {"url": url})
        with pytest.raises(OSError):
            await without.connect()
        client = make("udp_client", {"url": url, "bind": "127.0.0.1:0", "socket_options": reuse})
        await client.connect()
        await client.send([sink_event("a", frames=[b"shared"])])
        # The kernel hands each datagram to one of the sockets sharing the port.
        pulls = [asyncio.create_task(s.pull()) for s in (first, second)]
        done, pending = await asyncio.wait(pulls, return_when=asyncio.FIRST_COMPLETED)
        assert [t.result().data for t in done] == [b"shared"]
        for task in pending:
            task.cancel()
        for conn in (client, first, second):
            await conn.close()

    run(body())


def test_udp_socket_options_know_only_so_reuseport() -> None:
    with pytest.raises(ConnectorConfigError, match="unknown option 'TCP_NODELAY' \\(known: SO_REUSEPORT\\)"):
        make("udp_server", {"url": "127.0.0.1:0", "socket_options": {"TCP_NODELAY": True}})
