"""`AsyncSpuClient`: every SPU operation as a coroutine, with reconnect and retries.

Retries: a request that fails because the connection broke (or the server was
shutting down) is retried on a fresh connection with exponential backoff. That
makes a retried produce at-least-once (it may have been appended before the
connection died); exactly-once writers use stage/commit, which is idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from contraflow.security import client_token
from contraflow.spu.client.exactly_once import commits
from contraflow.spu.client.routing import ROUTED_APIS, LoneRoutes, Routes, route_of, split_bootstrap
from contraflow.spu.protocol import Acks, ApiKey, ErrorCode, SpuError
from contraflow.spu.protocol.batch import (
    HEADER_SIZE,
    Headers,
    batch_size_at,
    encode_batch,
    iter_batches,
    numbered,
)
from contraflow.spu.protocol.compression import Compression
from contraflow.spu.protocol.errors import REROUTE
from contraflow.spu.protocol.fetch import DEFAULT_FETCH_BYTES, FetchResult, OffsetSpec
from contraflow.spu.protocol.idempotence import NO_PRODUCER, new_producer_id, producer_field
from contraflow.spu.protocol.internal_topics import INTERNAL_TOPICS
from contraflow.spu.protocol.topics import Isolation, TopicConfig, TopicDescription, TopicPartition
from contraflow.spu.rpc.client import Buffer, Connection, Response, RetryPolicy

FAILOVER_TIMEOUT_S = 30.0  # a partition request keeps retrying through an election this long
ROUTE_TIMEOUT_S = 2.0  # one SPU's answer to a metadata refresh


# Sends one produce's batch, made by `encode` from its producer field (NO_PRODUCER: none).
BatchSender = Callable[[TopicPartition, Callable[[int], list[Buffer]], Acks], Awaitable[tuple[int, int]]]


def _parts(batch: Buffer | Sequence[Buffer]) -> list[Buffer]:
    """One encoded batch or several, as the list of buffers to send."""
    if isinstance(batch, Buffer):
        return [batch]
    return list(batch)


def fetch_result(response: Response) -> FetchResult:
    f = response.fields
    return FetchResult(
        list(iter_batches(response.payload)), f["next_offset"], f["high_watermark"], f["log_start_offset"]
    )


class Tail(Protocol):
    """A partition's tail as `AsyncSpuClient.stream` hands it out: iterate for FetchResults."""

    async def open(self) -> None:
        """Open now (iteration opens lazily otherwise): fixes where "-1, the end" is."""

    def __aiter__(self) -> AsyncIterator[FetchResult]: ...

    async def close(self) -> None: ...


class AsyncSpuClient:
    """Talks to one SPU over one multiplexed connection (opened lazily, reopened on failure),
    or to a cluster: `addr` may list bootstrap SPUs (`A,B,C`), and each partition's
    requests then go to its leader, following leader changes (see `routing`)."""

    def __init__(
        self,
        addr: str,
        *,
        request_timeout_s: float = 30.0,
        connect_timeout_s: float = 5.0,
        retry: RetryPolicy | None = None,
        token: str | None = None,
        idempotent: bool = True,
    ) -> None:
        self.addr = addr
        self.bootstrap = split_bootstrap(addr)
        self.token = token if token is not None else client_token()
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retry = retry or RetryPolicy()
        self.failover_timeout_s = FAILOVER_TIMEOUT_S
        self._home = self.bootstrap[0]  # where requests that are not about one partition go
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        self._routes: Routes | None = None  # learnt on the first partition request
        self._routes_lock = asyncio.Lock()
        self.idempotent = idempotent
        # How a produce's batch is sent, chosen with the routes: numbered where the SPUs use it.
        self._send_batch: BatchSender = self._send_plain
        self._producer_id = new_producer_id()
        self._sequences: dict[TopicPartition, int] = {}
        self._send_order: dict[TopicPartition, asyncio.Lock] = {}
        self._unanswered: dict[TopicPartition, set[tuple[int, int]]] = {}  # (producer, sequence)

    async def connection(self, addr: str | None = None) -> Connection:
        """The connection to `addr` (default: the home SPU), opened if need be."""
        addr = addr or self._home
        conn = self._conns.get(addr)
        if conn is None or conn.closed:
            lock = self._connecting.setdefault(addr, asyncio.Lock())
            async with lock:
                conn = self._conns.get(addr)
                if conn is None or conn.closed:
                    conn = await Connection.open(addr, self.connect_timeout_s)
                    if self.token is not None:
                        await self._authenticate(conn, self.token)
                    self._conns[addr] = conn
        return conn

    async def partition_connection(self, topic: str, partition: int) -> Connection:
        """The connection to the partition's leader (the home SPU when it is alone)."""
        routes = await self.routes()
        addr = routes.leader_addr(topic, partition)
        if addr is None:
            await self.refresh_routes()
            routes = await self.routes()
            addr = routes.leader_addr(topic, partition)
        if addr is None and topic in INTERNAL_TOPICS and topic not in routes.metadata.topics:
            return await self.connection()  # any SPU creates the cluster's own topic on demand
        if addr is None:
            raise SpuError(ErrorCode.NOT_LEADER, f"{topic}/{partition} has no leader right now")
        return await self.connection(addr)

    async def routes(self) -> Routes:
        """What the SPUs answered to METADATA, asked once however many requests wait for it.

        Concurrent first callers wait for the one lookup, in the order they called:
        pipelined requests (a writer's numbered stage requests) must leave in the order
        they were made, and two lookups could answer in either order."""
        if self._routes is None:
            async with self._routes_lock:
                if self._routes is None:
                    routes = await self._ask_routes()
                    numbering = self.idempotent and routes.recognises_retries
                    self._send_batch = self._send_numbered if numbering else self._send_plain
                    self._routes = routes
        return self._routes

    async def _ask_routes(self) -> Routes:
        try:
            answer = await self.request(ApiKey.METADATA, {})
        except SpuError as err:
            if err.code is not ErrorCode.UNSUPPORTED_API:
                raise
            return LoneRoutes(addr=self._home)  # an SPU from before clusters: alone
        return Routes.from_answer(answer.fields, self._home)

    async def refresh_routes(self) -> None:
        """Ask every SPU we know for metadata; keep the newest version anyone has."""
        routes = await self.routes()
        addrs = routes.metadata_addrs(self.bootstrap)
        answers = await asyncio.gather(*(self._metadata_at(a) for a in addrs), return_exceptions=True)
        for answer in answers:
            if not isinstance(answer, Routes) or isinstance(answer, LoneRoutes):
                continue  # unreachable, or an SPU alone (not the cluster's)
            if self._routes is None or answer.metadata.version >= self._routes.metadata.version:
                self._routes = answer

    async def _metadata_at(self, addr: str) -> Routes:
        conn = await self.connection(addr)
        return Routes.from_answer((await conn.request(ApiKey.METADATA, {}, (), ROUTE_TIMEOUT_S)).fields, addr)

    async def _authenticate(self, conn: Connection, token: str) -> None:
        """The handshake before any other request (an SPU without a token accepts any)."""
        try:
            await conn.request(ApiKey.AUTHENTICATE, {"token": token}, (), self.request_timeout_s)
        except BaseException:
            await conn.close()
            raise

    async def request(
        self,
        api: ApiKey,
        fields: dict[str, Any],
        payload: Sequence[Buffer] = (),
        on_sent: Callable[[], None] | None = None,
    ) -> Response:
        """Send one request, reconnecting and retrying with backoff on connection failures;
        in a cluster a partition's request goes to its leader and follows failovers.
        `on_sent`: called once the first attempt is written (see Connection.request)."""
        if api in ROUTED_APIS:
            return await self._routed(api, fields, payload, on_sent)
        delays = iter(self.retry.delays())
        while True:
            try:
                conn = await self.connection()
                return await conn.request(api, fields, payload, self.request_timeout_s, on_sent=on_sent)
            except SpuError as err:
                delay = next(delays, None)
                if not err.retriable or delay is None:
                    raise
                if err.code is ErrorCode.CONNECTION_ERROR:
                    self._next_home()
                await asyncio.sleep(delay)

    def _next_home(self) -> None:
        """The home SPU is unreachable: try the next bootstrap address."""
        if len(self.bootstrap) > 1:
            self._home = self.bootstrap[(self.bootstrap.index(self._home) + 1) % len(self.bootstrap)]

    async def _routed(
        self,
        api: ApiKey,
        fields: dict[str, Any],
        payload: Sequence[Buffer],
        on_sent: Callable[[], None] | None,
    ) -> Response:
        """To the partition's leader (a lone SPU leads them all); on NOT_LEADER or a lost
        leader: fresh metadata and a retry, with the backoff the routes call for (in a cluster,
        until `failover_timeout_s`, long enough for an election)."""
        delays = (await self.routes()).retry_delays(self.retry, self.failover_timeout_s)
        while True:
            try:
                conn = await self.partition_connection(*route_of(api, fields))
                return await conn.request(api, fields, payload, self.request_timeout_s, on_sent=on_sent)
            except SpuError as err:
                delay = next(delays, None)
                if not (err.retriable or err.code in REROUTE) or delay is None:
                    raise
            await asyncio.sleep(delay)
            await self.refresh_routes()

    async def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close()

    async def __aenter__(self) -> AsyncSpuClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- admin -----------------------------------------------------------------------------------

    async def api_versions(self) -> dict[int, tuple[int, int]]:
        response = await self.request(ApiKey.API_VERSIONS, {})
        return {int(k): (int(low), int(high)) for k, low, high in response.fields["apis"]}

    async def create_topic(self, name: str, config: TopicConfig | None = None) -> None:
        await self.request(ApiKey.CREATE_TOPIC, {"name": name, "config": (config or TopicConfig()).to_dict()})

    async def replicated_config(self, config: TopicConfig) -> TopicConfig:
        """`config` replicated as a cluster replicates its own topics (min(3, SPUs) replicas,
        min(2, replicas) in sync) when this client talks to a cluster; as it is for a lone SPU."""
        await self.refresh_routes()  # the newest metadata: a bootstrap SPU's may predate the last SPU
        return (await self.routes()).replicated(config)

    async def durable_acks(self) -> Acks:
        """The acks at which an append outlives its SPU's crash (`Routes.durable_acks`)."""
        return (await self.routes()).durable_acks

    async def delete_topic(self, name: str) -> None:
        await self.request(ApiKey.DELETE_TOPIC, {"name": name})

    async def list_topics(self) -> list[str]:
        return list((await self.request(ApiKey.LIST_TOPICS, {})).fields["topics"])

    async def describe_topic(self, name: str) -> TopicDescription:
        response = await self.request(ApiKey.DESCRIBE_TOPIC, {"name": name})
        return TopicDescription.from_dict(response.fields["topic"])

    # -- records ---------------------------------------------------------------------------------

    async def produce(
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
        await self.routes()  # which way batches are sent
        return await self._send_batch(
            (topic, partition),
            lambda field: [encode_batch(values, keys, headers, timestamps, compression, producer_id=field)],
            acks,
        )

    async def _send_plain(
        self, tp: TopicPartition, encode: Callable[[int], list[Buffer]], acks: Acks
    ) -> tuple[int, int]:
        """The batch as it is, without a producer's numbers: to SPUs that would not use them."""
        return await self._produce(encode(NO_PRODUCER), tp, acks, None)

    async def _send_numbered(
        self, tp: TopicPartition, encode: Callable[[int], list[Buffer]], acks: Acks
    ) -> tuple[int, int]:
        """Number the batch (producer id, sequence) and send it: a retry is recognised, also by
        a new leader. Batches must reach the leader in sequence order, so a partition's
        produces take turns from numbering to being written (not to being answered)."""
        turn = self._send_order.setdefault(tp, asyncio.Lock())
        await turn.acquire()
        done = False

        def next_turn() -> None:
            nonlocal done
            if not done:
                done = True
                turn.release()

        unanswered = self._unanswered.setdefault(tp, set())
        ids = self._next_sequence(tp)
        unanswered.add(ids)
        deadline = time.monotonic() + self.failover_timeout_s
        try:
            while True:
                try:
                    return await self._produce(encode(producer_field(*ids)), tp, acks, next_turn)
                except SpuError as err:
                    if err.code is not ErrorCode.OUT_OF_ORDER_SEQUENCE or time.monotonic() > deadline:
                        raise
                if any(p == ids[0] and n < ids[1] for p, n in unanswered):
                    await asyncio.sleep(self.retry.initial_s)  # an earlier batch is being retried
                    continue
                # Earlier batches failed or were lost (an unclean election): they will not come,
                # so this one starts a new producer instead of waiting for them forever.
                unanswered.discard(ids)
                self._producer_id, self._sequences = new_producer_id(), {}
                ids = self._next_sequence(tp)
                unanswered.add(ids)
        finally:
            unanswered.discard(ids)
            next_turn()

    def _next_sequence(self, tp: TopicPartition) -> tuple[int, int]:
        """(producer id, sequence) of the next batch to a cluster partition: a retry of it
        is recognised by the leader, also after a failover."""
        sequence = self._sequences.get(tp, 0)
        self._sequences[tp] = sequence + 1
        return self._producer_id, sequence

    async def produce_encoded(
        self, topic: str, partition: int, batch: Buffer | Sequence[Buffer], acks: Acks = Acks.LEADER
    ) -> tuple[int, int]:
        """Append encoded batch(es); (-1, -1) with acks=NONE, which gets no answer.
        One whole batch to a cluster is numbered like `produce`'s (idempotent retries)."""
        parts = _parts(batch)
        single = len(parts) == 1 and len(parts[0]) >= HEADER_SIZE and batch_size_at(parts[0]) == len(parts[0])
        if not single or acks is Acks.NONE:
            return await self._produce(parts, (topic, partition), acks, None)
        await self.routes()  # which way batches are sent
        return await self._send_batch(
            (topic, partition),
            lambda field: parts if field == NO_PRODUCER else numbered(parts[0], field),
            acks,
        )

    async def _produce(
        self, parts: list[Buffer], tp: TopicPartition, acks: Acks, on_sent: Callable[[], None] | None
    ) -> tuple[int, int]:
        """One produce request of `parts` to `tp`; `on_sent` as in `request`. `InProcessSpuClient`
        appends through its door instead."""
        topic, partition = tp
        fields = {"topic": topic, "partition": partition, "acks": int(acks)}
        if acks is Acks.NONE:
            await (await self.partition_connection(topic, partition)).send_only(ApiKey.PRODUCE, fields, parts)
            return -1, -1
        response = await self.request(ApiKey.PRODUCE, fields, parts, on_sent)
        return int(response.fields["base_offset"]), int(response.fields["last_offset"])

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int = DEFAULT_FETCH_BYTES,
        isolation: Isolation = "committed",
    ) -> FetchResult:
        fields = {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "max_bytes": max_bytes,
            "isolation": isolation,
        }
        return fetch_result(await self.request(ApiKey.FETCH, fields))

    async def list_offsets(
        self, topic: str, partition: int, at: OffsetSpec, isolation: Isolation = "committed"
    ) -> int | None:
        fields: dict[str, Any] = {"topic": topic, "partition": partition, "isolation": isolation}
        if isinstance(at, int):
            fields.update(spec="timestamp", timestamp=at)
        else:
            fields["spec"] = at
        offset = (await self.request(ApiKey.LIST_OFFSETS, fields)).fields["offset"]
        return None if offset is None else int(offset)

    def stream(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        isolation: Isolation = "committed",
        credit_bytes: int = 4 * 1024 * 1024,
        max_bytes: int = 256 * 1024,
    ) -> Tail:
        """Tail a partition from `offset` (-1: from the end); iterate for FetchResults as they arrive.
        `credit_bytes` bounds the pushes the SPU sends ahead of what the caller has read."""
        return self._tail(topic, partition, offset, isolation, credit_bytes, max_bytes)

    def _tail(
        self, topic: str, partition: int, offset: int, isolation: Isolation, credit_bytes: int, max_bytes: int
    ) -> Tail:
        """How this client tails a partition: a stream fetch over TCP (`InProcessSpuClient`: its door)."""
        return StreamFetch(self, topic, partition, offset, isolation, credit_bytes, max_bytes)

    # -- consumer offsets ------------------------------------------------------------------------

    async def commit_offset(self, consumer: str, topic: str, partition: int, offset: int) -> None:
        fields = {"consumer": consumer, "topic": topic, "partition": partition, "offset": offset}
        await self.request(ApiKey.OFFSET_COMMIT, fields)

    async def fetch_offset(self, consumer: str, topic: str, partition: int) -> int | None:
        fields = {"consumer": consumer, "topic": topic, "partition": partition}
        offset = (await self.request(ApiKey.OFFSET_FETCH, fields)).fields["offset"]
        return None if offset is None else int(offset)

    # -- transactions ----------------------------------------------------------------------------

    async def stage(
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
        """Stage encoded batch(es) for a later commit; False if the batch id is already committed.
        Give increasing `sequence` numbers per writer attempt to make retries safe."""
        parts = _parts(batch)
        fields = {
            "producer_id": producer_id,
            "batch_id": batch_id,
            "topic": topic,
            "partition": partition,
            "writer": writer,
            "attempt": attempt,
            "sequence": sequence,
        }
        return bool((await self.request(ApiKey.TXN_STAGE, fields, parts)).fields["staged"])

    async def stage_range(
        self,
        producer_id: str,
        batch_id: int,
        topic: str,
        partition: int,
        source: TopicPartition,
        start: int,
        end: int,
        *,
        writer: str = "",
        attempt: int = 0,
        sequence: int | None = None,
    ) -> dict[str, Any]:
        """Have a lone SPU stage the records [start, end) of its own partition `source` for a
        later commit, without their bytes leaving it (`protocol.range_stage`); the reply's
        `batches`, `bytes` and `records` staged. A cluster answers UNSUPPORTED_API."""
        fields = {
            "producer_id": producer_id,
            "batch_id": batch_id,
            "topic": topic,
            "partition": partition,
            "source_topic": source[0],
            "source_partition": source[1],
            "start": start,
            "end": end,
            "writer": writer,
            "attempt": attempt,
            "sequence": sequence,
        }
        return (await self.request(ApiKey.TXN_STAGE_RANGE, fields)).fields

    async def commit(
        self,
        producer_id: str,
        batch_id: int,
        expected_batches: int | None = None,
        *,
        partitions: Mapping[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, int]:
        """Make the staged batches visible; the end offset per partition. Idempotent: a
        committed batch id returns the offsets recorded the first time.

        `partitions`: how many record batches were staged per (topic, partition); each
        partition's leader commits it, and a lone SPU, which leads them all, commits the
        whole batch atomically (`exactly_once.commits`). Without them the home SPU commits
        what it staged, checking `expected_batches` (a lone SPU only)."""
        if not partitions:
            return await commits.commit_staged(self, producer_id, batch_id, expected_batches)
        return await commits.commit(self, producer_id, batch_id, partitions)

    async def abort(self, producer_id: str, batch_id: int) -> bool:
        """Drop what was staged for the batch, on every SPU."""
        return await commits.abort(self, producer_id, batch_id)

    async def ledger(
        self, producer_id: str, batch_id: int, *, topics: Iterable[str] | None = None
    ) -> dict[TopicPartition, int] | None:
        """The end offsets recorded when the batch was committed, None if it never was
        (in a cluster: where it is committed and replicated, asked of every leader).
        `topics`: only those (partitions of other topics without a leader then do not
        hold the answer up)."""
        return await commits.ledger(self, producer_id, batch_id, topics)

    async def set_control(self, name: str, value: Any) -> None:
        """Publish a small JSON value for other processes (None removes it)."""
        await self.request(ApiKey.CONTROL_SET, {"name": name, "value": value})

    async def get_control(self, name: str) -> Any:
        """The value last published under `name`, or None."""
        return (await self.request(ApiKey.CONTROL_GET, {"name": name})).fields["value"]


class StreamFetch:
    """Async iterator over pushes of a stream fetch, granting credit back as it goes.

    If the connection drops, the stream reopens (with the client's backoff) at the
    offset after the last batch it delivered, so a tailing consumer survives an
    SPU restart without gaps or duplicates.
    """

    def __init__(
        self,
        client: AsyncSpuClient,
        topic: str,
        partition: int,
        offset: int,
        isolation: Isolation,
        credit_bytes: int,
        max_bytes: int,
    ) -> None:
        self._client = client
        self._fields: dict[str, Any] = {
            "topic": topic,
            "partition": partition,
            "isolation": isolation,
            "credit_bytes": credit_bytes,
            "max_bytes": max_bytes,
        }
        self.position = offset
        self._credit = credit_bytes
        self._used = 0
        self._conn: Connection | None = None
        self._stream_id = 0
        self._queue: asyncio.Queue[Response | BaseException] | None = None

    async def open(self) -> None:
        """Open now (iteration opens lazily otherwise): fixes where "-1, the end" is."""
        if self._queue is None:
            await self._open()

    async def _open(self) -> None:
        delays = iter(self._client.retry.delays())
        while True:
            try:
                conn = await self._client.partition_connection(
                    self._fields["topic"], self._fields["partition"]
                )
                cid = conn.next_id()
                queue = conn.open_stream(cid)
                fields = {**self._fields, "offset": self.position}
                response = await conn.request(
                    ApiKey.STREAM_FETCH, fields, (), self._client.request_timeout_s, cid
                )
                break
            except SpuError as err:
                delay = next(delays, None)
                if not (err.retriable or err.code in REROUTE) or delay is None:
                    raise
                await asyncio.sleep(delay)
                if err.code in REROUTE or err.code is ErrorCode.CONNECTION_ERROR:
                    await self._client.refresh_routes()
        self._conn, self._stream_id, self._queue = conn, cid, queue
        self.position = int(response.fields["offset"])
        self._used = 0

    def __aiter__(self) -> AsyncIterator[FetchResult]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[FetchResult]:
        from contraflow.spu.rpc.client import raise_for_error

        try:
            while True:
                if self._queue is None:
                    await self._open()
                assert self._queue is not None and self._conn is not None
                item = await self._queue.get()
                if isinstance(item, SpuError) and item.retriable:
                    self._queue = None
                    continue
                if isinstance(item, BaseException):
                    raise item
                raise_for_error(item.fields)
                result = fetch_result(item)
                self.position = result.next_offset
                await self._grant(len(item.payload))
                yield result
        finally:
            await self.close()

    async def _grant(self, consumed: int) -> None:
        """Return credit in chunks of a quarter of the window: few frames, never starved."""
        self._used += consumed
        if self._used >= self._credit // 4 and self._conn is not None and not self._conn.closed:
            grant, self._used = self._used, 0
            try:
                await self._conn.send_only(
                    ApiKey.STREAM_CREDIT, {"stream_id": self._stream_id, "credit_bytes": grant}
                )
            except SpuError:
                self._queue = None  # reopen on the next iteration

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.closed:
            conn.forget_stream(self._stream_id)
            with contextlib.suppress(SpuError):
                await conn.request(ApiKey.STREAM_CLOSE, {"stream_id": self._stream_id}, (), 5.0)
        self._queue = None
