"""A real HTTP(S) server on 127.0.0.1 that records request bodies, and can go down and come back on its port."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson


class Target:
    """Collects JSON bodies POSTed to it; `stop()` closes the port, `start()` listens on it again."""

    def __init__(self, status: int = 200, tls: ssl.SSLContext | None = None) -> None:
        self.status = status
        self.tls = tls
        self.attempts = 0
        self.bodies: list[object] = []
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Lock()

    def start(self) -> Target:
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with target._lock:
                    target.attempts += 1
                    if target.status == 200:
                        target.bodies.extend(orjson.loads(line) for line in body.splitlines() if line.strip())
                self.send_response(target.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        if self.tls is not None:
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def received(self) -> list[object]:
        with self._lock:
            return list(self.bodies)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/events"
