"""The SPU's door for clients in its own process (`contraflow.spu.client.in_process`).

It makes the calls the protocol's handlers make for PRODUCE, STREAM_FETCH and
OFFSET_COMMIT, minus the socket and the framing: appends go through one
`OrderedAppender` per partition and the node's `append` (same acks, same
durability, same order as the calls arrive), reads are whole batches copied
out of the log's files with `pread` (`copied`: a segment may be unmapped once
the read is answered, and its pages are never mapped into this process),
and engine errors become the same `SpuError`s a remote client gets. Every
coroutine runs on the SPU's event loop; the client hands them over from its
own thread.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import Executor
from dataclasses import dataclass, field

from contraflow.spu.client.in_process import Push
from contraflow.spu.node.appender import OrderedAppender
from contraflow.spu.node.membership import Membership
from contraflow.spu.node.partitions import Partitions, split_batches
from contraflow.spu.node.signals import HIGH_WATERMARK_RECHECK_S, PartitionSignals, woken
from contraflow.spu.protocol import Acks
from contraflow.spu.protocol.topics import Isolation, TopicPartition
from contraflow.spu.rpc.client import Buffer
from contraflow.spu.rpc.errors import translate
from contraflow.spu.rpc.server import FileSlice, Part


@dataclass(eq=False)  # a running thing: identity, not value, equality
class InProcessDoor:
    """Appends, tails and offset commits of a lone SPU, for clients in the same process."""

    loop: asyncio.AbstractEventLoop
    partitions: Partitions
    signals: PartitionSignals
    node: Membership
    executor: Executor
    _appenders: dict[TopicPartition, OrderedAppender] = field(default_factory=dict, init=False)
    # offset commits land in the order they were asked for
    _commits: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    async def append(self, topic: str, partition: int, batch: Buffer, acks: Acks) -> tuple[int, int]:
        tp = (topic, partition)
        appender = self._appenders.get(tp)
        if appender is None:
            appender = self._appenders[tp] = OrderedAppender(self.partitions, self.executor, tp)
        try:
            return await self.node.append(appender, split_batches(memoryview(batch), verify=False), acks)
        except Exception as err:
            raise translate(err) from err

    async def start_offset(self, topic: str, partition: int, offset: int) -> int:
        try:
            self.node.check_leader((topic, partition))
            return self.partitions.start_offset((topic, partition), offset)
        except Exception as err:
            raise translate(err) from err

    async def next_push(
        self, topic: str, partition: int, offset: int, max_bytes: int, isolation: Isolation
    ) -> Push:
        """Like a stream's push: read when there is visible data, else sleep until an append (or,
        with data waiting for the high watermark's fsync, a short recheck) wakes it."""
        tp = (topic, partition)
        wakeup = asyncio.Event()
        self.signals.subscribe(tp, wakeup)  # before the read: an append after it wakes us
        try:
            while True:
                wakeup.clear()
                try:
                    self.node.check_leader(tp)
                    view = self.partitions.read(tp, offset, max_bytes, isolation)
                    if view.size:
                        return Push(view.fields(), copied(view.parts))
                except Exception as err:
                    raise translate(err) from err
                recheck = (
                    HIGH_WATERMARK_RECHECK_S if view.uncommitted_tail and isolation == "committed" else None
                )
                await woken(wakeup, recheck)
        finally:
            self.signals.unsubscribe(tp, wakeup)

    async def commit_offset(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        try:
            async with self._commits:
                await self.node.commit_offset(consumer, topic, partition, offset)
        except Exception as err:
            raise translate(err) from err


def copied(parts: list[Part]) -> bytes:
    """A read's batches as one buffer of their own. File slices (every read past a few pages) are
    read with `pread`: one copy in the kernel with the GIL released, and the log's pages never
    mapped here, so the storage can hand the pages behind its tail back (`Segment.release_cache`);
    copying out of the mmap held the GIL for the copy and faulted each page into this process."""
    if len(parts) == 1 and isinstance(parts[0], FileSlice):
        return _read(parts[0])
    return b"".join(_read(p) if isinstance(p, FileSlice) else p for p in parts)


def _read(part: FileSlice) -> bytes:
    data = os.pread(part.file.fileno(), part.length, part.position)
    if len(data) != part.length:  # the slice lies within what the log wrote: never short
        raise OSError(f"read {len(data)} of {part.length} bytes of a log segment")
    return data
