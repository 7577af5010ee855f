"""The `http_server` connector's ASGI types and server (see `contraflow.asgi_server`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from contraflow.asgi_server import EmbeddedAsgiServer
from contraflow.connectors.base import ConnectionLost
from contraflow.connectors.base.tls import ServerTls

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

GRACEFUL_SHUTDOWN_S = 2


class AsgiServer(EmbeddedAsgiServer):
    """An HTTP connector's server: a port in use is a `ConnectionLost` the runtime retries."""

    def __init__(self, app: Asgi, host: str, port: int, tls: ServerTls | None = None) -> None:
        super().__init__(
            app,
            host,
            port,
            error=ConnectionLost,
            purpose="the HTTPS server" if tls else "the HTTP server",
            graceful_shutdown_s=GRACEFUL_SHUTDOWN_S,
            tls_cert=tls.cert if tls else None,
            tls_key=tls.key if tls else None,
            tls_client_ca=tls.cafile if tls else None,
        )
