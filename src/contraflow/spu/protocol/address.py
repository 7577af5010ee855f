"""SPU addresses as users write them: HOST:PORT."""

from __future__ import annotations


def parse_addr(addr: str) -> tuple[str, int]:
    """Split "host:port" (an empty host means 127.0.0.1; port 0 lets a server pick one)."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"SPU address must be HOST:PORT, got {addr!r}")
    return host.strip("[]") or "127.0.0.1", int(port)
