"""A watchdog for the runtime's event loop: every connector, the monitor and the API share it.

A task wakes every `interval_s` and measures how late it woke; a late wake-up
means something ran on the loop without yielding (a blocking call in a
connector, a huge decode). Past `threshold_s` it logs one structured warning
(`event=watchdog`, how long the loop was blocked), so a stalled flow has a
visible cause instead of only slow numbers.
"""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("contraflow.runtime.watchdog")


async def watch_loop(interval_s: float = 0.25, threshold_s: float = 0.5) -> None:
    """Run until cancelled, warning whenever the loop was blocked for more than `threshold_s`."""
    while True:
        before = time.monotonic()
        await asyncio.sleep(interval_s)
        blocked = time.monotonic() - before - interval_s
        if blocked > threshold_s:
            log.warning(
                "event=watchdog loop_blocked_s=%.3f: a task ran without yielding",
                blocked,
                extra={"event": "watchdog", "blocked_s": blocked},
            )
