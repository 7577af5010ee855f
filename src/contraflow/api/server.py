"""Running the API with uvicorn inside the runtime's own asyncio loop.

The runtime owns the process: its signals (SIGINT/SIGTERM start quiescence)
and its loop. So the server here installs no signal handlers, binds its
socket itself (a port in use is a `UserError`, not uvicorn's `sys.exit`),
and is stopped by the runtime when the flows have drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from contraflow.errors import UserError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9898

# Seconds open connections get to finish when the server stops.
GRACEFUL_SHUTDOWN_S = 5


class _EmbeddedServer(uvicorn.Server):
    """uvicorn's server without its signal capture: the runtime handles signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` (or `:port`, or `port`) as given to `--api`; the host defaults to 127.0.0.1."""
    host, sep, port_text = address.rpartition(":")
    if not sep:
        host, port_text = "", address
    host = host.strip("[]") or DEFAULT_HOST
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UserError(f"invalid API address '{address}': expected HOST:PORT, e.g. 127.0.0.1:9898")
    return host, int(port_text)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port; UserError when the address cannot be used."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise UserError(f"cannot resolve API host '{host}': {e.strerror}") from None
    family, kind, proto, _, sockaddr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port} for the API: {e.strerror}") from None
    sock.setblocking(False)
    return sock


class ApiServer:
    """One uvicorn server as a task of the running loop: `await start()`, later `await stop()`."""

    def __init__(self, app: FastAPI, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
        self.host = host
        self.port = port
        config = uvicorn.Config(
            app,
            lifespan="off",
            log_config=None,  # the runtime configures logging; uvicorn's loggers propagate to it
            log_level="warning",
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
        self._server = _EmbeddedServer(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        """`host:port` actually bound (the real port when 0 was asked for)."""
        return f"{self.host}:{self.port}"

    async def start(self) -> str:
        """Bind, start serving in a task, and return once requests are accepted."""
        sock = bind(self.host, self.port)
        self.port = sock.getsockname()[1]
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name=f"api {self.address}")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # re-raise why it could not start
                raise RuntimeError("API server stopped during startup")
            await asyncio.sleep(0.01)
        return self.address

    async def wait(self) -> None:
        """Until the server stops."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        """Stop accepting, let open requests finish (up to GRACEFUL_SHUTDOWN_S), and return."""
        task, self._task = self._task, None
        if task is None:
            return
        self._server.should_exit = True
        await asyncio.wait([task])
        if not task.cancelled():
            task.result()  # a crash of the server surfaces here


async def serve(app: FastAPI, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Serve `app` until this coroutine's task is cancelled, then shut down gracefully."""
    server = ApiServer(app, host, port)
    try:
        await server.start()
        await server.wait()
    finally:
        await server.stop()
