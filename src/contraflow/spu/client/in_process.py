"""A client of an SPU that runs in this very process: appends, tails and offset commits without a socket.

`contraflow run` starts its SPU as a thread of its own process, and the
runtime's source and sink pumps are that SPU's busiest clients: every pull
is one append and every sink push one read. Over loopback TCP each of those
is framed, copied into the kernel and out again, and parsed on the other
side, which cost a third of the runtime's CPU per event. An SPU started in
this process opens a `Door` under its address (`open_door`), and
`spu_client(addr)` then hands out an `InProcessSpuClient`: its appends,
tails and offset commits go through the door onto the SPU's own event loop,
into the same calls the protocol's handlers make (same ordering, acks,
durability and errors); everything else goes over TCP as before. A remote
SPU or cluster opens no door here, so its clients keep the network path.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from contraflow.spu.client.aio import AsyncSpuClient, fetch_result
from contraflow.spu.protocol import Acks, ErrorCode, SpuError
from contraflow.spu.protocol.fetch import FetchResult
from contraflow.spu.protocol.topics import Isolation, TopicPartition
from contraflow.spu.rpc.client import Buffer, Response


@dataclass(frozen=True)
class Push:
    """One read from the door: the fetch answer's fields and its whole batches, copied out of the log."""

    fields: dict[str, Any]
    payload: bytes


class Door(Protocol):
    """What an SPU in this process serves to in-process clients (its loop runs in another thread;
    every coroutine here is run on that loop)."""

    loop: asyncio.AbstractEventLoop

    async def append(self, topic: str, partition: int, batch: Buffer, acks: Acks) -> tuple[int, int]:
        """Append one or more encoded batches as a produce would; (first offset, last offset)."""
        ...

    async def start_offset(self, topic: str, partition: int, offset: int) -> int:
        """Where a tail asked to start at `offset` starts (-1: the end)."""
        ...

    async def next_push(
        self, topic: str, partition: int, offset: int, max_bytes: int, isolation: Isolation
    ) -> Push:
        """Whole batches from `offset` once there are any visible (waits until then)."""
        ...

    async def commit_offset(self, consumer: str, topic: str, partition: int, offset: int) -> None: ...


STOPPED = "the SPU in this process stopped"
_doors: dict[str, Door] = {}
_doors_lock = threading.Lock()


def open_door(addr: str, door: Door) -> None:
    """Clients asking for `addr` from now on get the in-process path to `door`."""
    with _doors_lock:
        _doors[addr] = door


def close_door(addr: str) -> None:
    """The SPU at `addr` is stopping: new clients use TCP (and find it gone, as any client would)."""
    with _doors_lock:
        _doors.pop(addr, None)


def door_at(addr: str) -> Door | None:
    with _doors_lock:
        return _doors.get(addr)


def spu_client(addr: str, **options: Any) -> AsyncSpuClient:
    """A client of the SPU at `addr`: in process when that SPU runs here, else over the network."""
    door = door_at(addr)
    if door is None:
        return AsyncSpuClient(addr, **options)
    return InProcessSpuClient(addr, door, **options)


class InProcessSpuClient(AsyncSpuClient):
    """`AsyncSpuClient` whose appends, tails and offset commits go through an in-process `Door`."""

    def __init__(self, addr: str, door: Door, **options: Any) -> None:
        super().__init__(addr, **options)
        self.door = door

    async def on_door(self, coro: Any) -> Any:
        """Run `coro` on the SPU's loop and wait for it here; a stopped SPU is a lost connection."""
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self.door.loop)
        except RuntimeError:  # its loop is closed
            coro.close()
            raise SpuError(ErrorCode.CONNECTION_ERROR, STOPPED) from None
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if future.cancelled() and task is not None and not task.cancelling():
                # the SPU's loop ended while serving it, not the caller: as a closed connection
                raise SpuError(ErrorCode.CONNECTION_ERROR, STOPPED) from None
            raise

    async def _produce(
        self, parts: list[Buffer], tp: TopicPartition, acks: Acks, on_sent: Callable[[], None] | None
    ) -> tuple[int, int]:
        """Append as the TCP path would, answered when `acks` says (acks=NONE waits for the append
        too: the caller's buffer is read by the SPU until then)."""
        whole = parts[0] if len(parts) == 1 else b"".join(parts)
        first, last = await self.on_door(self.door.append(*tp, whole, acks))
        if on_sent is not None:
            on_sent()
        return (-1, -1) if acks is Acks.NONE else (first, last)

    async def commit_offset(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        await self.on_door(self.door.commit_offset(consumer, topic, partition, offset))

    def _tail(
        self, topic: str, partition: int, offset: int, isolation: Isolation, credit_bytes: int, max_bytes: int
    ) -> InProcessStream:
        """One read at a time is in flight, so `credit_bytes` (the TCP stream's window of pushes
        ahead) has nothing to bound here."""
        return InProcessStream(self, topic, partition, offset, isolation, max_bytes)


@dataclass
class InProcessStream:
    """Async iterator over reads of a partition's tail, each waiting on the SPU for new batches."""

    client: InProcessSpuClient
    topic: str
    partition: int
    position: int
    isolation: Isolation
    max_bytes: int
    _opened: bool = field(default=False, init=False)

    async def open(self) -> None:
        """Fix where "-1, the end" is (iteration does it otherwise)."""
        if not self._opened:
            door = self.client.door
            self.position = await self.client.on_door(
                door.start_offset(self.topic, self.partition, self.position)
            )
            self._opened = True

    def __aiter__(self) -> AsyncIterator[FetchResult]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[FetchResult]:
        await self.open()
        door = self.client.door
        while True:
            push: Push = await self.client.on_door(
                door.next_push(self.topic, self.partition, self.position, self.max_bytes, self.isolation)
            )
            result = fetch_result(Response(push.fields, memoryview(push.payload)))
            self.position = result.next_offset
            yield result

    async def close(self) -> None:
        """Nothing stays open on the SPU between reads (a read in flight is cancelled with its waiter)."""
