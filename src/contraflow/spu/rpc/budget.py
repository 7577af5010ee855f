"""Process-wide limits of the SPU server: request bytes buffered, connections open.

Per-connection limits alone let many connections together grow the process
without bound; these are shared by every connection of one server.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


class ByteBudget:
    """Bytes of request bodies the whole server holds (being read or being handled).

    A reader waits (stops reading its socket: back-pressure on that client) until
    its frame fits; a frame is always admitted when nothing is held, so one frame
    up to the frame-size limit can always go through.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._released = asyncio.Condition()

    async def acquire(self, size: int) -> None:
        async with self._released:
            await self._released.wait_for(lambda: self.held == 0 or self.held + size <= self.limit)
            self.held += size

    async def release(self, size: int) -> None:
        async with self._released:
            self.held -= size
            self._released.notify_all()


class ConnectionCount:
    """Open connections against `--max-connections`: the newest one past it is refused."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def try_open(self) -> bool:
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def close(self) -> None:
        self.open -= 1


@dataclass(frozen=True)
class SharedLimits:
    """The limits another listener of the same server (the Kafka port) counts against."""

    budget: ByteBudget
    connections: ConnectionCount
