"""Awaiting something unless a stop event comes first: the one race every loop in contraflow runs.

Connectors and runners wait for input (a queue, a stream fetch, stdin, a
timer) but must let go when their flow quiesces. `unless_stopped` is the only
place that race is written, so it ends the same way everywhere:

- the work finished first (even in the same loop turn as the stop): its
  result, or its exception, as if it had been awaited directly;
- the stop came first: the work is cancelled and awaited, and `STOPPED` is
  returned, unless the work still produced a result while being cancelled
  (a queue item already taken is returned, never dropped); whatever it
  raised while being cancelled is part of stopping and not raised;
- the stop was already set: the work is not started;
- the caller is cancelled: the work is cancelled with it (nothing is left running).
"""

from __future__ import annotations

import asyncio
import enum
import inspect
from collections.abc import Awaitable
from typing import Final, Literal, TypeVar

T = TypeVar("T")


class Stopped(enum.Enum):
    """The type of `STOPPED` (an enum, so type checkers narrow `result is STOPPED`)."""

    STOPPED = "stopped"


STOPPED: Final = Stopped.STOPPED


async def unless_stopped(work: Awaitable[T], stop: asyncio.Event) -> T | Literal[Stopped.STOPPED]:
    """Await `work` unless `stop` is set first (then `STOPPED`); see the module docstring."""
    if stop.is_set():
        if inspect.iscoroutine(work):
            work.close()  # never started: no "was never awaited" warning
        return STOPPED
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        stopper.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.wait({task})
    if task.cancelled() or task.exception() is not None:
        return STOPPED
    return task.result()


async def sleep_unless(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep `seconds` or until `stop` is set; True when `stop` ended (or had ended) the wait."""
    if seconds <= 0:  # due now: only yield to the loop (paced sources call this in tight loops)
        await asyncio.sleep(0)
    else:
        await unless_stopped(asyncio.sleep(seconds), stop)
    return stop.is_set()
