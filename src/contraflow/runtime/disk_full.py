"""A source whose appends meet a full SPU disk stops behind a breaker and resumes once space is free.

The SPU refuses an append with DISK_FULL when its data directory's filesystem
is full, writing nothing of it (docs/spu-storage.md, "A full disk"). The
source has already pulled what it was appending, so dropping the refusal
would lose it, and failing the flow would stop it for a state that ends when
someone frees space. So the source keeps the pull, opens its breaker with
cause `BreakerCause.DISK_FULL` (the status line, `GET /v1/flows` and a
`breaker` event say `disk full: ...` with the SPU's words), and tries the
same append again, waiting longer each time (0.1 s doubling to 1 s: resuming soon after space is freed costs one small request a second), pulling
nothing meanwhile. The first append that lands closes the breaker; nothing
was lost and nothing is appended twice (a refused append wrote nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from contraflow.backoff import backoff
from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.stopping import STOPPED, unless_stopped

T = TypeVar("T")
FIRST_WAIT_S = 0.1
MAX_WAIT_S = 1.0
REASON_PREFIX = "disk full: "

# open (True) or closed (False), and why
Report = Callable[[bool, str], None]


class DiskFullBreaker:
    """One source's appends, held through a full disk. `report` hears the breaker open and close;
    `stopping` ends the waiting (the refusal is raised then: the pull never reached the log, and
    a restarted source reads it again from its last position in the log)."""

    def __init__(self, report: Report, stopping: asyncio.Event) -> None:
        self.report = report
        self.stopping = stopping
        self.is_open = False

    async def append(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """`attempt()` until it is not refused for a full disk."""
        waits = backoff(FIRST_WAIT_S, MAX_WAIT_S)
        while True:
            try:
                result = await attempt()
            except SpuError as err:
                if err.code is not ErrorCode.DISK_FULL:
                    raise
                if not self.is_open:
                    self.is_open = True
                    self.report(True, REASON_PREFIX + str(err))
                if await unless_stopped(asyncio.sleep(next(waits)), self.stopping) is STOPPED:
                    raise
                continue
            if self.is_open:
                self.is_open = False
                self.report(False, "space freed: appends resumed")
            return result
