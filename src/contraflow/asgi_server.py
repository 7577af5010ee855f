"""Serving an ASGI app with uvicorn inside an asyncio loop someone else owns.

Both the REST API and the `http_server` connector run in the runtime's loop,
and the runtime owns the process's signals (SIGINT/SIGTERM start quiescence).
So uvicorn's signal capture is disabled, and the listening socket is bound
here, so that a port in use raises the caller's error type instead of
uvicorn calling `sys.exit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import uvicorn


class _LoopOwnedServer(uvicorn.Server):
    """uvicorn's server without its signal capture: the loop's owner handles signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listen(host: str, port: int, error: type[Exception], purpose: str) -> socket.socket:
    """A non-blocking listening TCP socket on host:port; `error` when the address cannot be used."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise error(f"cannot resolve host '{host}' for {purpose}: {err.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as err:
        sock.close()
        raise error(f"cannot listen on {host}:{port} for {purpose}: {err.strerror}") from None
    sock.setblocking(False)
    return sock


class EmbeddedAsgiServer:
    """One uvicorn server as a task of the running loop: `await start()`, later `await stop()`."""

    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        *,
        error: type[Exception],
        purpose: str,
        graceful_shutdown_s: float,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_client_ca: str | None = None,
    ) -> None:
        """`tls_client_ca`: with TLS, clients must present a certificate signed by this CA."""
        self.host, self.port = host, port
        self._error, self._purpose = error, purpose
        config = uvicorn.Config(
            app,
            interface="asgi3",
            lifespan="off",
            log_config=None,  # the runtime configures logging; uvicorn's loggers propagate to it
            log_level="warning",
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=int(graceful_shutdown_s),
            ssl_certfile=tls_cert,
            ssl_keyfile=tls_key,
            ssl_ca_certs=tls_client_ca,
            ssl_cert_reqs=ssl.CERT_REQUIRED if tls_client_ca else ssl.CERT_NONE,
        )
        self._server = _LoopOwnedServer(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        """`host:port` actually bound (the real port when 0 was asked for)."""
        return f"{self.host}:{self.port}"

    async def start(self) -> str:
        """Bind, start serving in a task, and return once requests are accepted."""
        sock = listen(self.host, self.port, self._error, self._purpose)
        self.port = sock.getsockname()[1]
        self._task = asyncio.create_task(
            self._server.serve(sockets=[sock]), name=f"{self._purpose} {self.address}"
        )
        while not self._server.started:  # uvicorn offers no startup event; startup takes milliseconds
            if self._task.done():
                self._task.result()  # re-raise why it could not start
                raise self._error(f"{self._purpose} on {self.address} stopped during startup")
            await asyncio.sleep(0.005)
        return self.address

    async def wait(self) -> None:
        """Until the server stops."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        """Stop accepting, let open requests finish (up to the graceful shutdown time), and return."""
        task, self._task = self._task, None
        if task is None:
            return
        self._server.should_exit = True
        await asyncio.wait([task])
        if not task.cancelled():
            task.result()  # a crash of the server surfaces here
