"""A gate in front of a connector's loop: closed while any reason to hold it exists.

Pause, an open circuit breaker downstream, back-pressure on the output
channel and the controlled start are independent reasons; each adds its own
key and removes only that key, so resuming a paused source does not override
a breaker that is still open. The loop awaits `wait()` before every pull.
"""

from __future__ import annotations

import asyncio


class Gate:
    """Open when no reason holds it; `reasons` say why it is closed (for status lines and the API)."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}
        self._open = asyncio.Event()
        self._open.set()

    def hold(self, key: str, why: str) -> None:
        """Close the gate for `key` (replacing an earlier `why` for the same key)."""
        self._reasons[key] = why
        self._open.clear()

    def release(self, key: str) -> None:
        """Drop `key`; the gate opens when no other key holds it."""
        self._reasons.pop(key, None)
        if not self._reasons:
            self._open.set()

    def holds(self, key: str) -> bool:
        return key in self._reasons

    @property
    def is_open(self) -> bool:
        return not self._reasons

    @property
    def reasons(self) -> list[str]:
        """Why the gate is closed, one phrase per reason, oldest first."""
        return list(self._reasons.values())

    async def wait(self) -> None:
        """Return once the gate is open."""
        while self._reasons:
            await self._open.wait()
