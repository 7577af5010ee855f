"""Stream fetch: the server pushes new batches to a tailing consumer as they arrive.

The consumer opens a stream with an initial credit in bytes and tops it up with
STREAM_CREDIT frames as it processes what it got. The server pushes whenever the
partition has visible data past the stream's position and credit is positive
(one push may overshoot the credit by at most one batch: batches are never
split). With no data or no credit the stream sleeps on an event that appends
and credit both set: no polling, and a record reaches the consumer as soon as
it is visible.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from contraflow.spu.node.partitions import Partitions
from contraflow.spu.node.signals import HIGH_WATERMARK_RECHECK_S, PartitionSignals, woken
from contraflow.spu.protocol import ApiKey
from contraflow.spu.protocol.topics import TopicPartition
from contraflow.spu.rpc.errors import translate
from contraflow.spu.rpc.server import Connection, error_fields


@dataclass
class StreamState:
    tp: TopicPartition
    offset: int
    max_bytes: int
    credit: int
    isolation: str
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    def add_credit(self, credit_bytes: int) -> None:
        self.credit += credit_bytes
        self.wakeup.set()


class StreamRegistry:
    """Open streams per connection, keyed by the id (correlation id) that opened them."""

    def __init__(self, partitions: Partitions, signals: PartitionSignals) -> None:
        self._partitions = partitions
        self._signals = signals
        self._states: dict[tuple[int, int], StreamState] = {}

    def open(self, conn: Connection, stream_id: int, state: StreamState) -> None:
        key = (conn.id, stream_id)
        self.close(conn, stream_id)
        self._states[key] = state
        self._signals.subscribe(state.tp, state.wakeup)
        task = asyncio.create_task(self._pump(conn, stream_id, state))
        conn.streams[stream_id] = task
        task.add_done_callback(lambda _t: self._forget(conn, stream_id, state))

    def credit(self, conn: Connection, stream_id: int, credit_bytes: int) -> bool:
        state = self._states.get((conn.id, stream_id))
        if state is None:
            return False
        state.add_credit(credit_bytes)
        return True

    def close(self, conn: Connection, stream_id: int) -> bool:
        task = conn.streams.pop(stream_id, None)
        if task is None:
            return False
        task.cancel()
        return True

    def topic_deleted(self, topic: str) -> None:
        """Wake the topic's streams: their next read fails and ends them with an error."""
        self._signals.wake_topic(topic)

    def _forget(self, conn: Connection, stream_id: int, state: StreamState) -> None:
        if self._states.get((conn.id, stream_id)) is state:
            del self._states[(conn.id, stream_id)]
        self._signals.unsubscribe(state.tp, state.wakeup)
        if conn.streams.get(stream_id) is not None and conn.streams[stream_id].done():
            conn.streams.pop(stream_id, None)

    async def _pump(self, conn: Connection, stream_id: int, state: StreamState) -> None:
        """Push until closed; a failure (topic deleted...) ends the stream with an error push."""
        try:
            await self._push_while_open(conn, stream_id, state)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            error = translate(err)
            await conn.send(ApiKey.STREAM_FETCH, stream_id, error_fields(error.code, str(error)))

    async def _push_while_open(self, conn: Connection, stream_id: int, state: StreamState) -> None:
        """Push batches while there is credit and data; otherwise sleep until either changes."""
        while not conn.closed:
            state.wakeup.clear()
            recheck: float | None = None
            if state.credit > 0:
                view = self._partitions.read(
                    state.tp, state.offset, min(state.max_bytes, state.credit), state.isolation
                )
                if view.size:
                    state.offset = view.next_offset
                    state.credit -= view.size
                    await conn.send(ApiKey.STREAM_FETCH, stream_id, view.fields(), view.parts)
                    continue
                if view.uncommitted_tail and state.isolation == "committed":
                    recheck = HIGH_WATERMARK_RECHECK_S
            await woken(state.wakeup, recheck)
