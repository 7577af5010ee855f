"""Tailing several partitions of a topic at once, for the `log` source.

One pump task per partition iterates the SPU's push stream and hands whole
fetch results to a small shared queue; when the queue is full the pump stops
iterating, stops granting credit, and the SPU stops pushing: back-pressure
without polling. A rewind restarts one partition's pump under a new
generation, so results already queued from before the rewind are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass

from contraflow.spu.client.aio import AsyncSpuClient
from contraflow.spu.protocol import SpuError
from contraflow.spu.protocol.batch import Record
from contraflow.spu.protocol.fetch import FetchResult
from contraflow.stopping import STOPPED, unless_stopped

QUEUED_RESULTS = 4


@dataclass
class _Pump:
    position: int  # next offset this pump's stream will deliver
    generation: int = 0
    task: asyncio.Task[None] | None = None


class TopicTail:
    """Records of the given partitions, from the given offsets, as they are committed to the log."""

    def __init__(
        self, client: AsyncSpuClient, topic: str, starts: dict[int, int], stop: asyncio.Event
    ) -> None:
        self.client = client
        self.topic = topic
        self.stop = stop
        self._queue: asyncio.Queue[tuple[int, int, FetchResult | SpuError]] = asyncio.Queue(QUEUED_RESULTS)
        self._pumps = {p: _Pump(offset) for p, offset in starts.items()}
        self._records: deque[tuple[int, Record]] = deque()
        for partition in self._pumps:
            self._start(partition)

    def _start(self, partition: int) -> None:
        pump = self._pumps[partition]
        pump.task = asyncio.create_task(self._run(partition, pump.generation, pump.position))

    async def _run(self, partition: int, generation: int, offset: int) -> None:
        stream = self.client.stream(self.topic, partition, offset)
        try:
            async for result in stream:
                await self._queue.put((partition, generation, result))
        except SpuError as err:
            await self._queue.put((partition, generation, err))
        finally:
            await stream.close()

    async def next(self) -> tuple[int, Record] | None:
        """The next (partition, record); None once `stop` is set. Raises SpuError if a stream failed."""
        while not self._records:
            item = await self._get()
            if item is None:
                return None
            partition, generation, result = item
            pump = self._pumps[partition]
            if generation != pump.generation:
                continue  # queued before a rewind of this partition
            if isinstance(result, SpuError):
                raise result
            for batch in result.batches:
                self._records.extend((partition, r) for r in batch.records(start_offset=pump.position))
            pump.position = max(pump.position, result.next_offset)
        return self._records.popleft()

    async def next_run(self, limit: int) -> tuple[int, list[Record]] | None:
        """The next record and those right behind it of the same partition already here (at most
        `limit`): everything a pull can take without waiting. None once `stop` is set."""
        first = await self.next()
        if first is None:
            return None
        partition, record = first
        run = [record]
        while len(run) < limit and self._records and self._records[0][0] == partition:
            run.append(self._records.popleft()[1])
        return partition, run

    async def _get(self) -> tuple[int, int, FetchResult | SpuError] | None:
        if not self._queue.empty():
            return self._queue.get_nowait()
        item = await unless_stopped(self._queue.get(), self.stop)
        return None if item is STOPPED else item

    async def rewind(self, partition: int, offset: int) -> None:
        """Read `partition` again from `offset`; what was buffered of it is dropped."""
        pump = self._pumps[partition]
        await _cancel(pump.task)
        self._records = deque(item for item in self._records if item[0] != partition)
        pump.generation += 1
        pump.position = offset
        self._start(partition)

    async def close(self) -> None:
        for pump in self._pumps.values():
            await _cancel(pump.task)


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
