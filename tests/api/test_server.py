"""The embedded uvicorn server: binding, address parsing, start/stop inside a running loop."""

from __future__ import annotations

import asyncio
import signal
import socket

import httpx
import pytest

from contraflow.api.app import create_app
from contraflow.api.server import DEFAULT_HOST, DEFAULT_PORT, ApiServer, parse_address, serve
from contraflow.errors import UserError
from tests.api.conftest import InMemoryRuntime


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9898", ("127.0.0.1", 9898)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        (":9000", ("127.0.0.1", 9000)),
        ("9000", ("127.0.0.1", 9000)),
        ("localhost:0", ("localhost", 0)),
        ("[::1]:9898", ("::1", 9898)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["", "host:", "host:port", "1.2.3.4:70000", "x:-1"])
def test_parse_bad_address(text: str) -> None:
    with pytest.raises(UserError, match="invalid API address"):
        parse_address(text)


def test_defaults_bind_loopback() -> None:
    server = ApiServer(create_app(InMemoryRuntime()))
    assert (server.host, server.port) == (DEFAULT_HOST, DEFAULT_PORT) == ("127.0.0.1", 9898)


def test_port_in_use_is_a_user_error() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]

    async def main() -> None:
        with pytest.raises(UserError, match=f"cannot listen on 127.0.0.1:{port}"):
            await ApiServer(create_app(InMemoryRuntime()), "127.0.0.1", port).start()

    try:
        asyncio.run(main())
    finally:
        taken.close()


def test_start_serve_stop_in_the_callers_loop() -> None:
    """The runtime's pattern: start, serve requests from the same loop, stop; the port is then closed."""

    async def main() -> None:
        runtime = InMemoryRuntime()
        server = ApiServer(create_app(runtime), "127.0.0.1", 0)
        address = await server.start()
        assert server.port != 0
        async with httpx.AsyncClient(base_url=f"http://{address}") as client:
            r = await client.get("/v1/flows")
            assert r.status_code == 200
            assert r.json() == []
        await server.stop()
        await server.stop()  # idempotent
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient(base_url=f"http://{address}") as client:
                await client.get("/v1/flows")

    asyncio.run(main())


def test_serve_task_is_cancelled_cleanly() -> None:
    """`serve()` as a task: cancelling it shuts the server down and frees the port."""

    async def main() -> None:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        task = asyncio.create_task(serve(create_app(InMemoryRuntime()), "127.0.0.1", port))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            for _ in range(200):
                try:
                    r = await client.get("/v1/version")
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.01)
            assert r.status_code == 200
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        again = socket.socket()
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.close()

    asyncio.run(main())


def test_server_leaves_signal_handlers_alone() -> None:
    """SIGINT/SIGTERM belong to the runtime (quiescence), not to uvicorn."""

    async def main() -> None:
        before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        server = ApiServer(create_app(InMemoryRuntime()), "127.0.0.1", 0)
        await server.start()
        during = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
        await server.stop()
        assert during == before

    asyncio.run(main())
