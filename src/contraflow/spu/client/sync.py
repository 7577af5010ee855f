"""`SpuClient`: the synchronous `LogClient` over the network.

It drives an `AsyncSpuClient` on a private event loop in a daemon thread, so
the blocking API (the CLI, Spark's Python workers) and the asyncio API share
one implementation of the protocol, retries and reconnects.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from contraflow.spu.api import DEFAULT_FETCH_BYTES, FetchResult, OffsetSpec
from contraflow.spu.client.aio import AsyncSpuClient, StreamFetch, TopicPartition
from contraflow.spu.client.connection import Buffer, RetryPolicy
from contraflow.spu.protocol import Acks
from contraflow.spu.protocol.batch import Headers
from contraflow.spu.protocol.compression import Compression
from contraflow.spu.storage.config import Isolation, TopicConfig, TopicDescription

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread, for calling coroutines from sync code."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.submit(coro).result()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Start `coro` on the loop and return at once (pipelining: several requests in flight)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
        self.loop.close()


class SyncStream:
    """Iterate for FetchResults as the SPU pushes them; `close()` ends the stream."""

    def __init__(self, thread: LoopThread, stream: StreamFetch) -> None:
        self._thread = thread
        self._agen = aiter(stream)

    def __iter__(self) -> SyncStream:
        return self

    def __next__(self) -> FetchResult:
        try:
            return self._thread.run(anext(self._agen))  # type: ignore[arg-type]
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        if not self._thread.loop.is_closed():
            self._thread.run(self._agen.aclose())  # type: ignore[attr-defined]

    def __enter__(self) -> SyncStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SpuClient:
    """A `LogClient` talking to an SPU at HOST:PORT; also offers stream fetch and transactions."""

    def __init__(
        self,
        addr: str,
        *,
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        retry: RetryPolicy | None = None,
        token: str | None = None,
    ) -> None:
        self._thread = LoopThread(f"spu-client-{addr}")
        self.aio = AsyncSpuClient(
            addr,
            request_timeout_s=request_timeout_s,
            connect_timeout_s=connect_timeout_s,
            retry=retry,
            token=token,
        )
        self.addr = addr

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The client's private event loop (its own thread)."""
        return self._thread.loop

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._thread.run(coro)

    def close(self) -> None:
        if not self._thread.loop.is_closed():
            self._run(self.aio.close())
            self._thread.stop()

    def __enter__(self) -> SpuClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- LogClient -------------------------------------------------------------------------------

    def api_versions(self) -> dict[int, tuple[int, int]]:
        return self._run(self.aio.api_versions())

    def create_topic(self, name: str, config: TopicConfig | None = None) -> None:
        self._run(self.aio.create_topic(name, config))

    def delete_topic(self, name: str) -> None:
        self._run(self.aio.delete_topic(name))

    def list_topics(self) -> list[str]:
        return self._run(self.aio.list_topics())

    def describe_topic(self, name: str) -> TopicDescription:
        return self._run(self.aio.describe_topic(name))

    def produce(
        self,
        topic: str,
        partition: int,
        values: Sequence[Buffer],
        keys: Sequence[Buffer | None] | None = None,
        headers: Sequence[Headers] | None = None,
        timestamps: Sequence[int] | None = None,
        compression: Compression | str | None = None,
        acks: Acks = Acks.LEADER,
    ) -> tuple[int, int]:
        return self._run(
            self.aio.produce(topic, partition, values, keys, headers, timestamps, compression, acks)
        )

    def produce_encoded(
        self, topic: str, partition: int, batch: Buffer | Sequence[Buffer], acks: Acks = Acks.LEADER
    ) -> tuple[int, int]:
        return self._run(self.aio.produce_encoded(topic, partition, batch, acks))

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = DEFAULT_FETCH_BYTES,
        isolation: Isolation = "committed",
    ) -> FetchResult:
        return self._run(self.aio.fetch(topic, partition, offset, max_bytes, isolation))

    def fetch_soon(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = DEFAULT_FETCH_BYTES,
        isolation: Isolation = "committed",
    ) -> Future[FetchResult]:
        """`fetch` without waiting: the reply arrives while the caller works on the previous one."""
        return self._thread.submit(self.aio.fetch(topic, partition, offset, max_bytes, isolation))

    def list_offsets(
        self, topic: str, partition: int, at: OffsetSpec, isolation: Isolation = "committed"
    ) -> int | None:
        return self._run(self.aio.list_offsets(topic, partition, at, isolation))

    def commit_offset(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        self._run(self.aio.commit_offset(consumer, topic, partition, offset))

    def fetch_offset(self, consumer: str, topic: str, partition: int) -> int | None:
        return self._run(self.aio.fetch_offset(consumer, topic, partition))

    # -- beyond LogClient ------------------------------------------------------------------------

    def stream(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        isolation: Isolation = "committed",
        credit_bytes: int = 4 << 20,
    ) -> SyncStream:
        """A blocking iterator over pushed batches, opened before this returns."""
        stream = self.aio.stream(topic, partition, offset, isolation=isolation, credit_bytes=credit_bytes)
        self._run(stream.open())
        return SyncStream(self._thread, stream)

    def stage(
        self,
        producer_id: str,
        batch_id: int,
        topic: str,
        partition: int,
        batch: Buffer | Sequence[Buffer],
        *,
        writer: str = "",
        attempt: int = 0,
        sequence: int | None = None,
    ) -> bool:
        return self.stage_soon(
            producer_id, batch_id, topic, partition, batch, writer=writer, attempt=attempt, sequence=sequence
        ).result()

    def stage_soon(
        self,
        producer_id: str,
        batch_id: int,
        topic: str,
        partition: int,
        batch: Buffer | Sequence[Buffer],
        *,
        writer: str = "",
        attempt: int = 0,
        sequence: int | None = None,
    ) -> Future[bool]:
        """`stage` without waiting; stages of one partition still apply in the order they were sent."""
        staging = self.aio.stage(
            producer_id, batch_id, topic, partition, batch, writer=writer, attempt=attempt, sequence=sequence
        )
        return self._thread.submit(staging)

    def commit(
        self, producer_id: str, batch_id: int, expected_batches: int | None = None
    ) -> dict[TopicPartition, int]:
        return self._run(self.aio.commit(producer_id, batch_id, expected_batches))

    def abort(self, producer_id: str, batch_id: int) -> bool:
        return self._run(self.aio.abort(producer_id, batch_id))

    def ledger(self, producer_id: str, batch_id: int) -> dict[TopicPartition, int] | None:
        return self._run(self.aio.ledger(producer_id, batch_id))

    def set_control(self, name: str, value: Any) -> None:
        self._run(self.aio.set_control(name, value))

    def get_control(self, name: str) -> Any:
        return self._run(self.aio.get_control(name))
