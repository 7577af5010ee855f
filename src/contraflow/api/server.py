"""Running the API with uvicorn inside the runtime's own asyncio loop.

The runtime owns the process and its loop (see `contraflow.asgi_server`); it
stops the API when the flows have drained.
"""

from __future__ import annotations

from fastapi import FastAPI

from contraflow.asgi_server import EmbeddedAsgiServer
from contraflow.errors import UserError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9898

# Seconds open connections get to finish when the server stops.
GRACEFUL_SHUTDOWN_S = 5


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` (or `:port`, or `port`) as given to `--api`; the host defaults to 127.0.0.1."""
    host, sep, port_text = address.rpartition(":")
    if not sep:
        host, port_text = "", address
    host = host.strip("[]") or DEFAULT_HOST
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UserError(f"invalid API address '{address}': expected HOST:PORT, e.g. 127.0.0.1:9898")
    return host, int(port_text)


class ApiServer(EmbeddedAsgiServer):
    """The REST API's server: a port in use is a `UserError` for the person running it."""

    def __init__(
        self,
        app: FastAPI,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ) -> None:
        super().__init__(
            app,
            host,
            port,
            error=UserError,
            purpose="the API",
            graceful_shutdown_s=GRACEFUL_SHUTDOWN_S,
            tls_cert=tls_cert,
            tls_key=tls_key,
        )


async def serve(app: FastAPI, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Serve `app` until this coroutine's task is cancelled, then shut down gracefully."""
    server = ApiServer(app, host, port)
    try:
        await server.start()
        await server.wait()
    finally:
        await server.stop()
