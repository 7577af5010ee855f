"""Wake-ups for tailing consumers: "partition P has new visible data".

Appends happen in worker threads; `wake_threadsafe` hops to the event loop,
where every stream subscribed to the partition gets its event set. A stream
clears its event before reading, so a wake-up between read and wait is never lost.
"""

from __future__ import annotations

import asyncio
import contextlib

from contraflow.spu.protocol.topics import TopicPartition

# With a bytes/interval flush policy the engine moves the high watermark from its
# flusher thread, which does not wake streams: a committed reader with data
# waiting for that fsync re-reads this often instead.
HIGH_WATERMARK_RECHECK_S = 0.005


async def woken(event: asyncio.Event, within_s: float | None) -> None:
    """Wait until `event` is set or `within_s` passed (None: no limit), whichever is first.

    `asyncio.timeout`, not `wait_for`: Python 3.11's `wait_for` returns instead of
    raising when a cancel lands as the event is set (tests/spu/rpc/test_client_cancel.py),
    and a stream or fetch being closed must end."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within_s):
            await event.wait()


class PartitionSignals:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._subscribers: dict[TopicPartition, set[asyncio.Event]] = {}

    def subscribe(self, tp: TopicPartition, event: asyncio.Event) -> None:
        self._subscribers.setdefault(tp, set()).add(event)

    def unsubscribe(self, tp: TopicPartition, event: asyncio.Event) -> None:
        events = self._subscribers.get(tp)
        if events is not None:
            events.discard(event)
            if not events:
                del self._subscribers[tp]

    def wake(self, tp: TopicPartition) -> None:
        """Loop thread only."""
        for event in self._subscribers.get(tp, ()):
            event.set()

    def wake_topic(self, topic: str) -> None:
        """Loop thread: every partition of `topic` (it was deleted: streams must notice)."""
        for tp in [tp for tp in self._subscribers if tp[0] == topic]:
            self.wake(tp)

    def wake_threadsafe(self, tp: TopicPartition) -> None:
        """From any thread; a no-op hop when nobody tails the partition."""
        if tp in self._subscribers and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.wake, tp)
