"""Tremor's `tls` on tcp, ws and http connectors, against real TLS peers (stdlib ssl, websockets,
httpx, http.server), with certificates made by trustme for each test session."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

import httpx
import pytest
import trustme
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from contraflow.connectors.base import ConnectionLost, Connector
from contraflow.connectors.http_server import HttpServerConnector
from contraflow.connectors.tcp_server import TcpServerConnector
from contraflow.connectors.ws_server import WsServerConnector
from tests.connectors.support import eventually, make, run, sink_event
from tests.runtime.http_target import Target


@dataclass(frozen=True)
class Pki:
    """A CA and files of certificates it signed (server: localhost and 127.0.0.1; a client), and a
    second CA that signed nothing here."""

    ca: trustme.CA
    cafile: str
    other_cafile: str
    cert: str
    key: str
    client_cert: str
    client_key: str

    def client_context(self, *, with_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.cafile)
        if with_cert:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        if require_client_cert:
            context.load_verify_locations(self.cafile)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def server_tls(self, **extra: str) -> dict[str, str]:
        return {"cert": self.cert, "key": self.key, **extra}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    where = tmp_path_factory.mktemp("pki")
    ca, other = trustme.CA(), trustme.CA()
    server, client = ca.issue_cert("localhost", "127.0.0.1"), ca.issue_cert("client.example")

    def write(name: str, data: bytes) -> str:
        (where / name).write_bytes(data)
        return str(where / name)

    return Pki(
        ca,
        write("ca.pem", ca.cert_pem.bytes()),
        write("other.pem", other.cert_pem.bytes()),
        write("server.pem", b"".join(b.bytes() for b in server.cert_chain_pems)),
        write("server.key", server.private_key_pem.bytes()),
        write("client.pem", b"".join(b.bytes() for b in client.cert_chain_pems)),
        write("client.key", client.private_key_pem.bytes()),
    )


async def started(kind: str, config: dict) -> Connector:
    conn = make(kind, config)
    await conn.connect()
    return conn


def test_tcp_server_serves_tls_and_can_require_client_certificates(pki: Pki) -> None:
    async def body() -> None:
        conn = await started("tcp_server", {"url": "127.0.0.1:0", "tls": pki.server_tls(cafile=pki.cafile)})
        assert isinstance(conn, TcpServerConnector)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", conn.port, ssl=pki.client_context(with_cert=True), server_hostname="localhost"
        )
        writer.write(b"hello\n")
        item = await asyncio.wait_for(conn.pull(), 5)
        assert item is not None and item.data == b"hello\n" and item.meta is not None
        assert item.meta["tcp_server"]["tls"] is True
        await conn.send([sink_event("reply", item.meta, frames=[b"over tls\n"])])
        assert await asyncio.wait_for(reader.readline(), 5) == b"over tls\n"
        # Without a client certificate the handshake is refused: nothing comes through.
        anonymous, _ = await asyncio.open_connection(
            "127.0.0.1", conn.port, ssl=pki.client_context(), server_hostname="localhost"
        )
        with pytest.raises((ssl.SSLError, ConnectionError)):
            if not await asyncio.wait_for(anonymous.read(1), 5):
                raise ConnectionResetError("closed without a word")
        assert conn.inbox.empty()
        writer.close()
        await conn.close()

    run(body())


def test_tcp_client_verifies_the_server_against_its_cafile_and_presents_its_certificate(pki: Pki) -> None:
    async def body() -> None:
        async def upper(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(1024):
                writer.write(data.upper())
                await writer.drain()

        server = await asyncio.start_server(
            upper, "127.0.0.1", 0, ssl=pki.server_context(require_client_cert=True)
        )
        url = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        tls = {"cafile": pki.cafile, "domain": "localhost", "cert": pki.client_cert, "key": pki.client_key}
        conn = await started("tcp_client", {"url": url, "tls": tls})
        await conn.send([sink_event("a", frames=[b"secret\n"])])
        item = await asyncio.wait_for(conn.pull(), 5)
        assert item is not None and item.data == b"SECRET\n" and item.meta is not None
        assert item.meta["tcp_client"]["tls"] is True
        await conn.close()
        untrusting = make(
            "tcp_client", {"url": url, "tls": {"cafile": pki.other_cafile, "domain": "localhost"}}
        )
        with pytest.raises(ConnectionLost, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusting.connect()  # signed by a CA it does not trust: the breaker stays open
        wrong_name = make("tcp_client", {"url": url, "tls": {"cafile": pki.cafile, "domain": "elsewhere"}})
        with pytest.raises(ConnectionLost, match="CERTIFICATE_VERIFY_FAILED"):
            await wrong_name.connect()
        server.close()

    run(body())


def test_ws_server_and_client_over_tls(pki: Pki) -> None:
    async def body() -> None:
        conn = await started("ws_server", {"url": "127.0.0.1:0", "tls": pki.server_tls()})
        assert isinstance(conn, WsServerConnector)
        async with connect(f"wss://localhost:{conn.port}/", ssl=pki.client_context()) as peer:
            await peer.send("hi\n")
            item = await asyncio.wait_for(conn.pull(), 5)
            assert item is not None and item.data == b"hi\n" and item.meta is not None
            assert item.meta["ws_server"]["tls"] is True
            await conn.send([sink_event("back", item.meta, frames=[b"back\n"])])
            assert await asyncio.wait_for(peer.recv(), 5) == "back\n"
        await conn.close()

        async def echo(ws: ServerConnection) -> None:
            async for message in ws:
                await ws.send(message)

        async with serve(echo, "127.0.0.1", 0, ssl=pki.server_context()) as server:
            url = f"wss://127.0.0.1:{next(iter(server.sockets)).getsockname()[1]}"
            client = await started(
                "ws_client", {"url": url, "tls": {"cafile": pki.cafile, "domain": "localhost"}}
            )
            await client.send([sink_event("x", frames=[b"echo me\n"])])
            item = await asyncio.wait_for(client.pull(), 5)
            assert item is not None and item.data == b"echo me\n" and item.meta is not None
            assert item.meta["ws_client"]["tls"] is True
            await client.close()
            refused = make("ws_client", {"url": url})  # wss:// with the system's CAs: not trusted
            with pytest.raises(ConnectionLost, match="CERTIFICATE_VERIFY_FAILED"):
                await refused.connect()

    run(body())


def test_http_server_and_client_over_tls(pki: Pki) -> None:
    async def body() -> None:
        conn = await started("http_server", {"url": "127.0.0.1:0", "tls": pki.server_tls()})
        assert isinstance(conn, HttpServerConnector)
        async with httpx.AsyncClient(verify=pki.client_context()) as http:
            call = asyncio.create_task(http.post(f"https://localhost:{conn.port}/in", content=b'{"a":1}'))
            item = await asyncio.wait_for(conn.pull(), 5)
            assert item is not None and item.meta is not None
            assert item.meta["request"]["url"]["scheme"] == "https"
            await conn.ack(item.token)
            assert (await asyncio.wait_for(call, 5)).status_code == 200
        await conn.close()

    run(body())
    target = Target(tls=pki.server_context()).start()
    try:

        async def client_side() -> None:
            tls = {"cafile": pki.cafile, "domain": "localhost"}
            conn = await started("http_client", {"url": target.url, "tls": tls})
            await conn.send([sink_event({"n": 1})])
            await eventually(lambda: target.received() == [{"n": 1}])
            await conn.close()

        run(client_side())
    finally:
        target.stop()
