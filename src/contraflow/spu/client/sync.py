"""`SpuClient`: the synchronous `LogClient` over the network.

It drives an `AsyncSpuClient` on a private event loop in a daemon thread, so
the blocking API (the CLI, Spark's Python workers) and the asyncio API share
one implementation of the protocol, retries and reconnects.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, Concatenate, ParamSpec, TypedDict, TypeVar, Unpack

from contraflow.spu.client.aio import AsyncSpuClient, Tail
from contraflow.spu.protocol.fetch import FetchResult
from contraflow.spu.rpc.client import RetryPolicy

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

    def __init__(self, thread: LoopThread, stream: Tail) -> None:
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


P = ParamSpec("P")


def streaming(
    method: Callable[Concatenate[AsyncSpuClient, P], Tail],
) -> Callable[Concatenate[SpuClient, P], SyncStream]:
    """The blocking twin of `AsyncSpuClient.stream`: the stream opened, then iterated from this thread."""

    @functools.wraps(method)
    def call(self: SpuClient, *args: P.args, **kwargs: P.kwargs) -> SyncStream:
        stream = method(self.aio, *args, **kwargs)
        self._run(stream.open())
        return SyncStream(self._thread, stream)

    return call


class ClientOptions(TypedDict, total=False):
    """`AsyncSpuClient`'s keyword options, which `SpuClient` passes on as they are."""

    request_timeout_s: float
    connect_timeout_s: float
    retry: RetryPolicy | None
    token: str | None


def blocking(
    method: Callable[Concatenate[AsyncSpuClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[SpuClient, P], T]:
    """The blocking twin of an `AsyncSpuClient` method: the same call, awaited on the loop thread.

    One definition of each operation (the async one), so the two clients
    cannot drift apart in signatures, defaults or behaviour.
    """

    @functools.wraps(method)
    def call(self: SpuClient, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._thread.run(method(self.aio, *args, **kwargs))

    return call


def soon(
    method: Callable[Concatenate[AsyncSpuClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[SpuClient, P], Future[T]]:
    """As `blocking`, but returning at once with a Future (several requests in flight)."""

    @functools.wraps(method)
    def call(self: SpuClient, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return self._thread.submit(method(self.aio, *args, **kwargs))

    return call


class SpuClient:
    """A `LogClient` talking to an SPU at HOST:PORT; also offers stream fetch and transactions."""

    def __init__(self, addr: str, **options: Unpack[ClientOptions]) -> None:
        """`options` are `AsyncSpuClient`'s (timeouts, retry policy, token), with its defaults."""
        self._thread = LoopThread(f"spu-client-{addr}")
        self.aio = AsyncSpuClient(addr, **options)
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

    # -- LogClient: each method is its `AsyncSpuClient` twin, run on the loop thread --------------

    api_versions = blocking(AsyncSpuClient.api_versions)
    create_topic = blocking(AsyncSpuClient.create_topic)
    replicated_config = blocking(AsyncSpuClient.replicated_config)
    delete_topic = blocking(AsyncSpuClient.delete_topic)
    list_topics = blocking(AsyncSpuClient.list_topics)
    describe_topic = blocking(AsyncSpuClient.describe_topic)
    produce = blocking(AsyncSpuClient.produce)
    produce_encoded = blocking(AsyncSpuClient.produce_encoded)
    fetch = blocking(AsyncSpuClient.fetch)
    # `fetch` without waiting: the reply arrives while the caller works on the previous one.
    fetch_soon = soon(AsyncSpuClient.fetch)
    list_offsets = blocking(AsyncSpuClient.list_offsets)
    commit_offset = blocking(AsyncSpuClient.commit_offset)
    fetch_offset = blocking(AsyncSpuClient.fetch_offset)

    # -- beyond LogClient ------------------------------------------------------------------------

    # A blocking iterator over pushed batches, opened before this returns.
    stream = streaming(AsyncSpuClient.stream)

    stage = blocking(AsyncSpuClient.stage)
    # `stage` without waiting; stages of one partition still apply in the order they were sent.
    stage_soon = soon(AsyncSpuClient.stage)
    stage_range = blocking(AsyncSpuClient.stage_range)
    commit = blocking(AsyncSpuClient.commit)
    abort = blocking(AsyncSpuClient.abort)
    ledger = blocking(AsyncSpuClient.ledger)
    set_control = blocking(AsyncSpuClient.set_control)
    get_control = blocking(AsyncSpuClient.get_control)
