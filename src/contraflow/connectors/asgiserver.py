"""Serving a plain ASGI callable with uvicorn inside the runtime's event loop.

The runtime owns signals and the loop, so uvicorn's signal capture is
disabled; the listening socket is bound here so a port in use is a
`ConnectionLost` the runtime can retry, not uvicorn's `sys.exit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

import uvicorn

from contraflow.connectors.base import ConnectionLost

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

GRACEFUL_SHUTDOWN_S = 2


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listen(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as err:
        raise ConnectionLost(f"cannot listen on {host}:{port}: {err}") from err
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as err:
        sock.close()
        raise ConnectionLost(f"cannot listen on {host}:{port}: {err.strerror}") from err
    sock.setblocking(False)
    return sock


class AsgiServer:
    """One uvicorn server as a task: `await start()` returns once it accepts; `await stop()`."""

    def __init__(self, app: Asgi, host: str, port: int) -> None:
        self.host, self.port = host, port
        config = uvicorn.Config(
            app,
            interface="asgi3",
            lifespan="off",
            log_level="warning",
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        sock = listen(self.host, self.port)
        self.port = sock.getsockname()[1]
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:  # uvicorn offers no startup event; startup takes milliseconds
            if self._task.done():
                self._task.result()
                raise ConnectionLost(f"HTTP server on {self.host}:{self.port} stopped during startup")
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._server.should_exit = True
        await asyncio.wait([task])
