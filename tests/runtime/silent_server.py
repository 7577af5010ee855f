"""A TCP server on 127.0.0.1 that accepts connections, reads nothing back, and never answers."""

from __future__ import annotations

import socket
import threading

from tests.runtime.test_contraflow import http_sink


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


def stalled_flow(server: SilentServer, interval_ns: int) -> str:
    """Troy connections of a flow stalled at both ends by `server`: a `tcp_client` source whose
    pull never returns and an HTTP sink whose send never gets an answer, with a metronome
    feeding the pipeline every `interval_ns` so there is always something to send."""
    return f"""
  define connector silent from tcp_client
  with codec = "json", preprocessors = ["separate"], config = {{"url": "127.0.0.1:{server.port}"}} end;
  create connector input from silent;
  define connector ticks from metronome with config = {{"interval": {interval_ns}}} end;
  create connector ticks;
  {http_sink(f"http://127.0.0.1:{server.port}/events")}
  create pipeline pass;
  connect /connector/input to /pipeline/pass;
  connect /connector/ticks to /pipeline/pass;
  connect /pipeline/pass to /connector/sink;
"""
