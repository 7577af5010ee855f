"""A TCP server on 127.0.0.1 that accepts connections, reads nothing back, and never answers."""

from __future__ import annotations

import socket
import threading


class SilentServer:
    """Accepts TCP connections, reads what arrives, never answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.connections:
            conn.close()
