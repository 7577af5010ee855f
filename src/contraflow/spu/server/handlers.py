"""Request handlers: typed request in, `Reply` out, one method per API.

Anything that may fsync (appends, commits, topic admin, consumer offsets) runs
in the server's thread pool; reads are served on the loop from the page cache.
Storage exceptions are translated to error codes in one place (`translate`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import Executor
from typing import Any

from contraflow.spu.node.appender import OrderedAppender
from contraflow.spu.node.exactly_once.transactions import TransactionCoordinator
from contraflow.spu.node.membership import Membership
from contraflow.spu.node.partitions import Partitions, split_batches
from contraflow.spu.protocol import (
    REQUEST_TYPES,
    Acks,
    ApiKey,
    ErrorCode,
    FrameHeader,
    SpuError,
    parse_request,
    unpack_meta,
)
from contraflow.spu.protocol import messages as m
from contraflow.spu.protocol.messages import API_VERSIONS, OFFSET_SPECS, check_isolation
from contraflow.spu.rpc.errors import translate
from contraflow.spu.rpc.server import Connection, Reply
from contraflow.spu.server.range_stage import RangeStager
from contraflow.spu.server.streams import StreamRegistry, StreamState
from contraflow.spu.storage.control import check_control_value

# Effects keep the order a client sent them in: appends per partition (so
# pipelined produces to different partitions do not wait for each other; produces
# go through the connection's OrderedAppender for the partition), the other state
# changes per connection.
PER_PARTITION_ORDER = frozenset(
    {ApiKey.TXN_STAGE, ApiKey.REPLICA_STAGE, ApiKey.TXN_STAGE_RANGE}
)  # produces: see OrderedAppender
CONNECTION_ORDER = frozenset(
    {ApiKey.TXN_COMMIT, ApiKey.TXN_ABORT, ApiKey.CREATE_TOPIC, ApiKey.DELETE_TOPIC, ApiKey.OFFSET_COMMIT}
)


def read_budget(conn: Connection, max_bytes: int) -> int:
    """A read's byte budget, kept well inside the frame limit (a client sized its
    buffers for that); at least one whole batch is always returned anyway."""
    return max(1, min(max_bytes, conn.limits.max_frame_bytes // 2))


Handler = Callable[[Connection, Any, memoryview, int], Awaitable[Reply | None]]


class Handlers:
    """The public port's dispatcher."""

    def __init__(
        self,
        partitions: Partitions,
        transactions: TransactionCoordinator,
        streams: StreamRegistry,
        executor: Executor,
        spu_id: int,
        membership: Membership,
    ) -> None:
        self._partitions = partitions
        self._node = membership  # alone or in a cluster: decided once, at start
        self._txns = transactions
        self._streams = streams
        self._executor = executor
        self._spu_id = spu_id
        self._table: dict[ApiKey, Handler] = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.STREAM_FETCH: self.stream_fetch,
            ApiKey.STREAM_CREDIT: self.stream_credit,
            ApiKey.STREAM_CLOSE: self.stream_close,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.CREATE_TOPIC: self.topic_admin,
            ApiKey.DELETE_TOPIC: self.topic_admin,
            ApiKey.LIST_TOPICS: self.topic_admin,
            ApiKey.DESCRIBE_TOPIC: self.topic_admin,
            ApiKey.TXN_STAGE: self.txn_stage,
            ApiKey.TXN_COMMIT: self.txn_commit,
            ApiKey.TXN_ABORT: self.txn_abort,
            ApiKey.TXN_LEDGER: self.txn_ledger,
            ApiKey.CONTROL_SET: self.control_set,
            ApiKey.CONTROL_GET: self.control_get,
            ApiKey.AUTHENTICATE: self.authenticate,
            ApiKey.METADATA: self.metadata,
            ApiKey.REPLICA_FETCH: self.replica_fetch,
            ApiKey.OFFSET_FOR_EPOCH: self.offset_for_epoch,
            ApiKey.REPLICA_STAGE: self.replica_stage,
        }
        if membership.stages_ranges:  # a cluster member refuses it (UNSUPPORTED_API): see range_stage
            self._table[ApiKey.TXN_STAGE_RANGE] = RangeStager(partitions, transactions, executor).handle

    async def dispatch(self, conn: Connection, header: FrameHeader, body: memoryview) -> Reply | None:
        api = ApiKey(header.api_key)
        meta = unpack_meta(body[: header.meta_length])
        request: Any = parse_request(REQUEST_TYPES[api], meta)
        handler = self._table.get(api)
        if handler is None:
            raise SpuError(ErrorCode.UNSUPPORTED_API, f"an SPU does not serve {api.name}")
        payload = body[header.meta_length :]
        try:
            if api in PER_PARTITION_ORDER:
                async with conn.order_lock((request.topic, request.partition)):
                    return await handler(conn, request, payload, header.correlation_id)
            if api in CONNECTION_ORDER:
                async with conn.order_lock(None):
                    return await handler(conn, request, payload, header.correlation_id)
            return await handler(conn, request, payload, header.correlation_id)
        except Exception as err:
            raise translate(err) from err

    # -- meta ------------------------------------------------------------------------------------

    async def authenticate(
        self, conn: Connection, req: m.AuthenticateRequest, payload: memoryview, cid: int
    ) -> Reply:
        """A repeated handshake on an authenticated connection (or to an SPU without a
        token): nothing to check; the first one is answered by the connection itself."""
        return Reply()

    async def api_versions(
        self, conn: Connection, req: m.ApiVersionsRequest, payload: memoryview, cid: int
    ) -> Reply:
        apis = [[int(k), low, high] for k, (low, high) in API_VERSIONS.items()]
        return Reply({"apis": apis, "spu_id": self._spu_id})

    async def metadata(
        self, conn: Connection, req: m.MetadataRequest, payload: memoryview, cid: int
    ) -> Reply:
        """A lone SPU says so; a cluster SPU hands out the controller's metadata it last got."""
        return Reply(self._node.metadata())

    async def replica_fetch(
        self, conn: Connection, req: m.ReplicaFetchRequest, payload: memoryview, cid: int
    ) -> Reply:
        return await self._node.replicas().leading.replica_fetch(req, read_budget(conn, req.max_bytes))

    async def offset_for_epoch(
        self, conn: Connection, req: m.OffsetForEpochRequest, payload: memoryview, cid: int
    ) -> Reply:
        return self._node.replicas().leading.offset_for_epoch(req)

    # -- records ---------------------------------------------------------------------------------

    async def produce(
        self, conn: Connection, req: m.ProduceRequest, payload: memoryview, cid: int
    ) -> Reply | None:
        acks = Acks(req.acks) if req.acks in tuple(Acks) else None
        if acks is None:
            raise SpuError(ErrorCode.INVALID_ARGUMENT, f"acks must be 0, 1 or 2, got {req.acks}")
        batches = split_batches(payload, verify=False)
        tp = (req.topic, req.partition)
        appender = conn.attachments.get(("appender", tp))
        if appender is None:
            appender = conn.attachments[("appender", tp)] = OrderedAppender(
                self._partitions, self._executor, tp
            )
        base, last = await self._node.append(appender, batches, acks)
        if acks is Acks.NONE:
            return None
        return Reply({"base_offset": base, "last_offset": last})

    async def fetch(self, conn: Connection, req: m.FetchRequest, payload: memoryview, cid: int) -> Reply:
        check_isolation(req.isolation)
        self._node.check_leader((req.topic, req.partition))
        max_bytes = read_budget(conn, req.max_bytes)
        view = self._partitions.read((req.topic, req.partition), req.offset, max_bytes, req.isolation)
        return Reply(view.fields(), view.parts)

    async def stream_fetch(
        self, conn: Connection, req: m.StreamFetchRequest, payload: memoryview, cid: int
    ) -> Reply:
        """Answers at once (the stream is open); pushes follow under the same correlation id."""
        check_isolation(req.isolation)
        self._node.check_leader((req.topic, req.partition))
        tp = (req.topic, req.partition)
        offset = self._partitions.start_offset(tp, req.offset)
        self._streams.open(
            conn,
            cid,
            StreamState(tp, offset, read_budget(conn, req.max_bytes), req.credit_bytes, req.isolation),
        )
        return Reply({"stream_id": cid, "offset": offset, "opened": True})

    async def stream_credit(
        self, conn: Connection, req: m.StreamCreditRequest, payload: memoryview, cid: int
    ) -> None:
        self._streams.credit(conn, req.stream_id, req.credit_bytes)

    async def stream_close(
        self, conn: Connection, req: m.StreamCloseRequest, payload: memoryview, cid: int
    ) -> Reply:
        if not self._streams.close(conn, req.stream_id):
            raise SpuError(ErrorCode.UNKNOWN_STREAM, f"no open stream {req.stream_id} on this connection")
        return Reply({"closed": True})

    async def list_offsets(
        self, conn: Connection, req: m.ListOffsetsRequest, payload: memoryview, cid: int
    ) -> Reply:
        check_isolation(req.isolation)
        if req.spec not in OFFSET_SPECS:
            raise SpuError(
                ErrorCode.INVALID_ARGUMENT, f"offset spec must be one of {', '.join(OFFSET_SPECS)}"
            )
        if req.spec == "timestamp" and req.timestamp is None:
            raise SpuError(ErrorCode.INVALID_ARGUMENT, "offset spec 'timestamp' needs a timestamp")
        self._node.check_leader((req.topic, req.partition))
        at = req.timestamp if req.spec == "timestamp" else req.spec
        offset = self._partitions.list_offset((req.topic, req.partition), at, req.isolation)  # type: ignore[arg-type]
        return Reply({"offset": offset})

    # -- consumer offsets ------------------------------------------------------------------------

    async def offset_commit(
        self, conn: Connection, req: m.OffsetCommitRequest, payload: memoryview, cid: int
    ) -> Reply:
        await self._node.commit_offset(req.consumer, req.topic, req.partition, req.offset)
        return Reply()

    async def offset_fetch(
        self, conn: Connection, req: m.OffsetFetchRequest, payload: memoryview, cid: int
    ) -> Reply:
        return Reply({"offset": await self._node.committed_offset(req.consumer, req.topic, req.partition)})

    # -- topics ----------------------------------------------------------------------------------

    async def topic_admin(
        self,
        conn: Connection,
        req: m.CreateTopicRequest | m.DeleteTopicRequest | m.ListTopicsRequest | m.DescribeTopicRequest,
        payload: memoryview,
        cid: int,
    ) -> Reply:
        """Create, delete, list, describe: the local store's, or the controller's in a cluster."""
        return Reply(await self._node.topic_admin(req))

    # -- transactions ----------------------------------------------------------------------------

    async def txn_stage(
        self, conn: Connection, req: m.TxnStageRequest, payload: memoryview, cid: int
    ) -> Reply:
        tp = (req.topic, req.partition)
        self._partitions.check_exists(tp)
        self._node.exactly_once.check_stage(req.producer_id, req.batch_id, tp)
        accepted = await self._stage(req, payload, conn.id)
        await self._node.exactly_once.staged(tp, req, payload)
        return Reply({"staged": accepted, "already_committed": not accepted})

    async def replica_stage(
        self, conn: Connection, req: m.TxnStageRequest, payload: memoryview, cid: int
    ) -> Reply:
        """A follower keeps its leader's staging (dropped when the commit is copied, or expired)."""
        tp = (req.topic, req.partition)
        self._partitions.check_exists(tp)
        await self._stage(req, payload, ("copy", req.producer_id, req.batch_id, req.writer))
        return Reply()

    async def _stage(self, req: m.TxnStageRequest, payload: memoryview, owner: Hashable) -> bool:
        """Stage a request's batches; one that will go to disk (`spill.py`) is written from a
        worker thread, not the event loop."""
        batches = split_batches(payload, verify=True)
        if not self._txns.spills(len(payload)):
            return self._txns.stage_request(req, batches, owner=owner)
        stage = functools.partial(self._txns.stage_request, req, batches, owner=owner)
        return await asyncio.get_running_loop().run_in_executor(self._executor, stage)

    async def txn_commit(
        self, conn: Connection, req: m.TxnCommitRequest, payload: memoryview, cid: int
    ) -> Reply:
        return Reply(await self._node.exactly_once.commit(req))

    async def txn_abort(
        self, conn: Connection, req: m.TxnAbortRequest, payload: memoryview, cid: int
    ) -> Reply:
        return Reply({"aborted": self._txns.abort(req.producer_id, req.batch_id)})

    async def txn_ledger(
        self, conn: Connection, req: m.TxnLedgerRequest, payload: memoryview, cid: int
    ) -> Reply:
        return Reply(self._node.exactly_once.ledger(req.producer_id, req.batch_id))

    # -- control values --------------------------------------------------------------------------

    async def control_set(
        self, conn: Connection, req: m.ControlSetRequest, payload: memoryview, cid: int
    ) -> Reply:
        check_control_value(req.name, req.value)
        await self._node.set_control(req.name, req.value)
        return Reply()

    async def control_get(
        self, conn: Connection, req: m.ControlGetRequest, payload: memoryview, cid: int
    ) -> Reply:
        return Reply({"value": await self._node.control(req.name)})
