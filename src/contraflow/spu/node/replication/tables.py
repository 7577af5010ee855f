"""Replicated tables: consumer offsets and control values of an SPU cluster.

A lone SPU keeps both in local files. In a cluster they must outlive the SPU
that took them, so each is a last-wins key/value table kept as the records of
one partition of an internal topic (`contraflow.consumer-offsets`,
`contraflow.control-values`), replicated like any other: the partition's leader
serves the table. A change is appended as one record (key, JSON value) with
acks=all and answered once the in-sync replicas hold it; the leader keeps the
table in memory and, when it starts leading at a new epoch, rebuilds it by
reading its log from the start (the last record of a key wins; a JSON `null`
removes the key). Clients send these requests to the internal partition's
leader (`client/routing.py`); an SPU asked while the topic does not exist yet
creates it (min(3, SPUs) replicas, 2 of them in sync) through the controller.

Compaction keeps the log from growing with time. Once the log has a closed
segment and holds more than twice as many records as the table has keys, the
leader pauses changes, appends a *snapshot* (one batch: a marker record, then
every key's value) with acks=all, and deletes the segments wholly before it
(`Partition.drop_before`). A replay that meets a snapshot starts the table
over from it, so any suffix of the log that holds the latest snapshot rebuilds
the same table. Followers drop what their leader's log no longer starts with
(`follower.py`, from the log start each fetch answer carries).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

import orjson

from contraflow.spu.node.appender import OrderedAppender
from contraflow.spu.node.partitions import AppendRequest, Partitions
from contraflow.spu.node.replication.leader import LeaderState
from contraflow.spu.node.replication.replicas import ReplicaManager
from contraflow.spu.protocol import Acks, ErrorCode, SpuError
from contraflow.spu.protocol.batch import decode_batch, encode_batch
from contraflow.spu.protocol.internal_topics import cluster_replication
from contraflow.spu.protocol.topics import TopicConfig, TopicPartition
from contraflow.spu.storage.partition import Partition

log = logging.getLogger(__name__)

TABLE_SEGMENT_BYTES = 4 << 20
REBUILD_READ_BYTES = 4 << 20
SNAPSHOT_HEADER = "contraflow.table-snapshot"  # on the first record of a snapshot batch
SNAPSHOT_MARKER: list[tuple[str, bytes]] = [(SNAPSHOT_HEADER, b"")]

CreateTopic = Callable[[str, TopicConfig], Awaitable[None]]


def offset_key(consumer: str, topic: str, partition: int) -> str:
    """A consumer offset's key in a cluster's offsets table (names cannot hold '/')."""
    return f"{consumer}/{topic}/{partition}"


class ReplicatedTable:
    """One internal topic's table, served by whichever SPU leads its partition 0."""

    def __init__(
        self,
        topic: str,
        partitions: Partitions,
        replicas: ReplicaManager,
        executor: Executor,
        create_topic: CreateTopic,
        spu_count: Callable[[], int],
    ) -> None:
        self.tp: TopicPartition = (topic, 0)
        self._partitions = partitions
        self._replicas = replicas
        self._executor = executor
        self._create_topic = create_topic
        self._spu_count = spu_count
        self._values: dict[str, tuple[int, Any]] = {}  # key -> (offset of its record, value)
        self._epoch = -1  # the leader epoch the table was built at
        self._building = asyncio.Lock()
        self._appender = OrderedAppender(partitions, executor, self.tp)
        self._changes_open = asyncio.Event()  # cleared while a snapshot is taken
        self._changes_open.set()
        self._no_changes = asyncio.Event()  # set while no change is between append and apply
        self._no_changes.set()
        self._changing = 0
        self._snapshot_at = -1  # where this leader's last snapshot starts

    async def get(self, key: str) -> Any:
        """The committed value of `key` (None if absent); NOT_LEADER unless this SPU leads."""
        await self._leading()
        found = self._values.get(key)
        return None if found is None else found[1]

    async def put(self, key: str, value: Any) -> None:
        """Replace `key`'s value (None removes it), answered once the in-sync replicas hold it."""
        state = await self._leading()
        found = self._values.get(key)
        if (None if found is None else found[1]) == value:
            return
        await self._changes_open.wait()
        self._changing += 1
        self._no_changes.clear()
        try:
            state = self._replicas.leading.check_produce(self.tp, Acks.COMMITTED)
            base = await self._append_committed(state, encode_batch([orjson.dumps(value)], [key.encode()]))
            if self._epoch == state.epoch:
                self._apply(key, base, value)
        finally:
            self._changing -= 1
            if not self._changing:
                self._no_changes.set()
        if self._compaction_due(state.partition):
            try:
                await self._compact()
            except SpuError as err:  # the change itself is done: compaction waits for the next one
                log.warning("compacting %s: %s", self.tp[0], err)

    async def _append_committed(self, state: LeaderState, batch: bytearray) -> int:
        """Append one batch with acks=all; its base offset once the in-sync replicas hold it."""
        base, last = await self._appender.append(AppendRequest([memoryview(batch)], False))
        await self._replicas.leading.appended(self.tp, state, last + 1, Acks.COMMITTED)
        return base

    def _compaction_due(self, part: Partition) -> bool:
        """A closed segment the last snapshot does not already cover, and more than half the
        log's records stale (so a snapshot frees at least as much as it writes)."""
        active = part.active_base_offset
        grown = part.log_end_offset - part.log_start_offset > 2 * len(self._values)
        return part.log_start_offset < active and self._snapshot_at < active and grown

    async def _compact(self) -> None:
        """Snapshot the table and drop the log before it. Changes wait meanwhile, so the
        snapshot holds every change the log holds before it."""
        if not self._changes_open.is_set():
            return  # a compaction runs already
        self._changes_open.clear()
        try:
            await self._no_changes.wait()
            state = self._replicas.leading.check_produce(self.tp, Acks.COMMITTED)
            if state.epoch != self._epoch or not self._compaction_due(state.partition):
                return
            keys = sorted(self._values)
            records = [orjson.dumps(None)] + [orjson.dumps(self._values[k][1]) for k in keys]
            headers = [SNAPSHOT_MARKER] + [[] for _ in keys]
            batch = encode_batch(records, [None, *(k.encode() for k in keys)], headers)
            base = await self._append_committed(state, batch)
            self._snapshot_at = base
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, state.partition.drop_before, base)
        finally:
            self._changes_open.set()

    def _apply(self, key: str, offset: int, value: Any) -> None:
        """Last wins by log order (concurrent puts may finish waiting in any order)."""
        found = self._values.get(key)
        if found is not None and found[0] > offset:
            return
        if value is None:
            self._values.pop(key, None)
        else:
            self._values[key] = (offset, value)

    async def _leading(self) -> LeaderState:
        """This SPU's leadership of the table's partition, the table rebuilt for its epoch."""
        try:
            state = self._replicas.leading.leader(self.tp)
        except SpuError as err:
            if err.code is not ErrorCode.UNKNOWN_TOPIC:
                raise
            await self._create()
            try:
                state = self._replicas.leading.leader(self.tp)
            except SpuError as again:
                if again.code is not ErrorCode.UNKNOWN_TOPIC:
                    raise
                # another SPU created it first; the next heartbeat tells us who leads it
                raise SpuError(ErrorCode.NOT_LEADER, f"{self.tp[0]} is being created") from None
        if state.epoch != self._epoch:
            async with self._building:
                if state.epoch != self._epoch:
                    loop = asyncio.get_running_loop()
                    self._values = await loop.run_in_executor(self._executor, _read_table, state.partition)
                    self._epoch = state.epoch
        return state

    async def ensure_exists(self) -> None:
        """Create the table's topic if the cluster has none yet (e.g. before anyone asks
        for its leader: the Kafka listener's FindCoordinator)."""
        await self._create()

    async def _create(self) -> None:
        """The first request of the cluster's life for this table creates its topic."""
        config = cluster_replication(
            TopicConfig(partitions=1, segment_bytes=TABLE_SEGMENT_BYTES), self._spu_count()
        )
        try:
            await self._create_topic(self.tp[0], config)
        except SpuError as err:
            if err.code is not ErrorCode.TOPIC_EXISTS:
                raise


def _read_table(part: Partition) -> dict[str, tuple[int, Any]]:
    """Every key's last value in the replica's log (a new leader's whole log is the truth)."""
    values: dict[str, tuple[int, Any]] = {}
    offset = part.log_start_offset
    while True:
        result = part.read(offset, REBUILD_READ_BYTES, isolation="uncommitted")
        if not result.batches:
            return values
        for view in result.batches:
            batch = decode_batch(view)
            if batch.headers()[0] == SNAPSHOT_MARKER:
                values.clear()  # the snapshot is the whole table at its offset
            for record_offset, key, value in zip(batch.offsets(), batch.keys(), batch.values(), strict=True):
                if key is None:
                    continue
                decoded = orjson.loads(value)
                if decoded is None:
                    values.pop(bytes(key).decode(), None)
                else:
                    values[bytes(key).decode()] = (record_offset, decoded)
        offset = result.next_offset
