"""SPU addresses as users write them (HOST:PORT) and the socket options both ends use."""

from __future__ import annotations

import socket

# Socket buffers sized for a few large batches in flight: fewer partial sends,
# fewer wake-ups per frame on both ends.
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024


def tune_socket(sock: socket.socket) -> bool:
    """Large buffers and no Nagle delay (frames are written whole, latency matters).

    False when the socket is already closed: a peer that dies right after the
    connection is accepted leaves nothing to tune, serve or send on."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
    except OSError:
        return False
    return True


def parse_addr(addr: str) -> tuple[str, int]:
    """Split "host:port" (an empty host means 127.0.0.1; port 0 lets a server pick one)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"SPU address must be HOST:PORT, got {addr!r}")
    return host.strip("[]") or "127.0.0.1", int(port)
