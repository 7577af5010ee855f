"""Batching producers: records accumulate per partition and leave as one batch when
`batch_bytes` is reached or `linger_ms` after the first record, whichever is first.

`AsyncProducer` is for asyncio code; `Producer` for threads (accumulation happens
in the caller's thread, only whole batches hop to the client's loop). Each
`send` returns a future of the record's offset. Up to `max_in_flight` batches
are in flight per producer; further sends wait (back-pressure).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Unpack

from contraflow.spu.client.aio import AsyncSpuClient
from contraflow.spu.client.sync import SpuClient
from contraflow.spu.protocol import Acks
from contraflow.spu.protocol.batch import Headers, RecordExtras, encode_batch
from contraflow.spu.protocol.compression import Compression
from contraflow.spu.protocol.topics import TopicPartition
from contraflow.spu.rpc.client import Buffer

AnyFuture = asyncio.Future[int] | concurrent.futures.Future[int]


@dataclass
class _Pending:
    """Records waiting to become one batch for one partition."""

    values: list[Buffer] = field(default_factory=list)
    keys: list[Buffer | None] = field(default_factory=list)
    headers: list[Headers] = field(default_factory=list)
    timestamps: list[int | None] = field(default_factory=list)
    futures: list[Any] = field(default_factory=list)
    size: int = 0

    def add(self, value: Buffer, future: Any, extras: RecordExtras) -> None:
        key = extras.get("key")
        self.values.append(value)
        self.keys.append(key)
        self.headers.append(extras.get("headers") or ())
        self.timestamps.append(extras.get("timestamp"))
        self.futures.append(future)
        self.size += len(value) + (len(key) if key is not None else 0) + 16

    def encode(self, compression: Compression | str | None) -> Buffer:
        keys = self.keys if any(k is not None for k in self.keys) else None
        headers = self.headers if any(self.headers) else None
        stamps = None
        if any(t is not None for t in self.timestamps):
            fallback = next(t for t in self.timestamps if t is not None)
            stamps = [fallback if t is None else t for t in self.timestamps]
        return encode_batch(self.values, keys, headers, stamps, compression)


def _settle(
    futures: list[Any], base: int, error: BaseException | None, set_result: Callable[[Any, int], None]
) -> None:
    for i, future in enumerate(futures):
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            set_result(future, base + i if base >= 0 else -1)


@dataclass(frozen=True)
class ProducerSettings:
    batch_bytes: int = 256 * 1024
    linger_ms: float = 5.0
    acks: Acks = Acks.LEADER
    compression: Compression | str | None = None
    max_in_flight: int = 8


class AsyncProducer:
    def __init__(self, client: AsyncSpuClient, settings: ProducerSettings | None = None) -> None:
        self._client = client
        self.settings = settings or ProducerSettings()
        self._pending: dict[TopicPartition, _Pending] = {}
        self._timers: dict[TopicPartition, asyncio.TimerHandle] = {}
        self._in_flight = asyncio.Semaphore(self.settings.max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()

    async def send(
        self, topic: str, partition: int, value: Buffer, **extras: Unpack[RecordExtras]
    ) -> asyncio.Future[int]:
        tp = (topic, partition)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        pending = self._pending.setdefault(tp, _Pending())
        pending.add(value, future, extras)
        if pending.size >= self.settings.batch_bytes:
            await self._ship(tp)
        elif tp not in self._timers:
            loop = asyncio.get_running_loop()
            self._timers[tp] = loop.call_later(self.settings.linger_ms / 1000, self._linger_expired, tp)
        return future

    def _linger_expired(self, tp: TopicPartition) -> None:
        self._timers.pop(tp, None)
        task = asyncio.ensure_future(self._ship(tp))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ship(self, tp: TopicPartition) -> None:
        timer = self._timers.pop(tp, None)
        if timer is not None:
            timer.cancel()
        pending = self._pending.pop(tp, None)
        if pending is None:
            return
        await self._in_flight.acquire()
        task = asyncio.ensure_future(self._produce(tp, pending))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _produce(self, tp: TopicPartition, pending: _Pending) -> None:
        try:
            batch = pending.encode(self.settings.compression)
            base, _ = await self._client.produce_encoded(tp[0], tp[1], batch, self.settings.acks)
            _settle(pending.futures, base, None, lambda f, o: f.set_result(o))
        except Exception as err:
            _settle(pending.futures, -1, err, lambda f, o: f.set_result(o))
        finally:
            self._in_flight.release()

    async def flush(self) -> None:
        """Send everything accumulated and wait until every batch is answered."""
        for tp in list(self._pending):
            await self._ship(tp)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        await self.flush()


class Producer:
    """Thread-side twin of AsyncProducer for a `SpuClient`: any thread may `send`."""

    def __init__(self, client: SpuClient, settings: ProducerSettings | None = None) -> None:
        self._client = client
        self._loop = client.loop
        self.settings = settings or ProducerSettings()
        self._lock = threading.Condition()
        self._pending: dict[TopicPartition, _Pending] = {}
        self._generation: dict[TopicPartition, int] = {}
        self._in_flight = 0

    def send(
        self, topic: str, partition: int, value: Buffer, **extras: Unpack[RecordExtras]
    ) -> concurrent.futures.Future[int]:
        """Queue one record; blocks only while `max_in_flight` batches await their answer."""
        tp = (topic, partition)
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self._lock:
            pending = self._pending.get(tp)
            if pending is None:
                pending = self._pending[tp] = _Pending()
                generation = self._generation[tp] = self._generation.get(tp, 0) + 1
                delay = self.settings.linger_ms / 1000
                self._loop.call_soon_threadsafe(
                    self._loop.call_later, delay, self._linger_expired, tp, generation
                )
            pending.add(value, future, extras)
            ready = self._pending.pop(tp) if pending.size >= self.settings.batch_bytes else None
            if ready is not None:
                while self._in_flight >= self.settings.max_in_flight:
                    self._lock.wait()
                self._in_flight += 1
        if ready is not None:
            self._ship(tp, ready, from_loop=False)
        return future

    def _linger_expired(self, tp: TopicPartition, generation: int) -> None:
        """Loop thread: ship the batch this timer was started for, unless it already left.
        Never waits for an in-flight slot (that would block the loop)."""
        with self._lock:
            if self._generation.get(tp) != generation or tp not in self._pending:
                return
            ready = self._pending.pop(tp)
            self._in_flight += 1
        self._ship(tp, ready, from_loop=True)

    def _ship(self, tp: TopicPartition, pending: _Pending, *, from_loop: bool) -> None:
        """Encode and hand the batch to the client's loop; settle futures when answered."""
        try:
            batch = pending.encode(self.settings.compression)
        except Exception as err:
            self._release()
            _settle(pending.futures, -1, err, lambda f, o: f.set_result(o))
            return
        produce = self._client.aio.produce_encoded(tp[0], tp[1], batch, self.settings.acks)
        if from_loop:
            task: asyncio.Future[tuple[int, int]] = asyncio.ensure_future(produce)
            task.add_done_callback(lambda done: self._finished(pending, done))
        else:
            future = asyncio.run_coroutine_threadsafe(produce, self._loop)
            future.add_done_callback(lambda done: self._finished(pending, done))

    def _finished(self, pending: _Pending, done: Any) -> None:
        self._release()
        error = done.exception()
        base = -1 if error is not None else done.result()[0]
        _settle(pending.futures, base, error, lambda f, o: f.set_result(o))

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._lock.notify_all()

    def flush(self) -> None:
        """Send everything queued and wait until every batch is answered."""
        with self._lock:
            ready = list(self._pending.items())
            self._pending.clear()
            self._in_flight += len(ready)
        for tp, pending in ready:
            self._ship(tp, pending, from_loop=False)
        with self._lock:
            while self._in_flight:
                self._lock.wait()

    def close(self) -> None:
        self.flush()
