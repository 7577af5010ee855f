"""An SPU's replicas: which partitions it leads or follows, as the controller decides.

`apply(metadata)` (after every heartbeat) makes the local state match what the
controller decided: it creates local copies of new topics, turns a partition's
replica into the leader at a new epoch (recording where the epoch starts), or
into a follower of another SPU (`follower.py`: truncate to where the epoch
histories diverge, then copy from the leader's private port). The leader's
work (serving those fetches, the high watermark, the in-sync set, produces
waiting for it) is `leader.py`'s `Leadership`, reached as `replicas.leading`. Both roles keep the idempotent producers' table and the
batch ledger (`exactly_once/log_ledger.py`) from the batches in their log; a replica that starts
leading first cuts off a commit its old leader left unfinished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

from contraflow.spu.client.aio import AsyncSpuClient
from contraflow.spu.node.exactly_once.log_ledger import CommitKey, ReplicatedLedger
from contraflow.spu.node.log_scan import batch_headers
from contraflow.spu.node.partitions import Partitions
from contraflow.spu.node.replication.epochs import EpochHistory
from contraflow.spu.node.replication.follower import Follower
from contraflow.spu.node.replication.leader import AlterIsr, Leadership, LeaderState
from contraflow.spu.node.signals import PartitionSignals
from contraflow.spu.protocol.batch import BatchHeader
from contraflow.spu.protocol.cluster_metadata import ClusterMetadata, PartitionState
from contraflow.spu.protocol.topics import TopicConfig, TopicPartition
from contraflow.spu.rpc.client import RetryPolicy
from contraflow.spu.storage.partition import Partition

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_S = 1.0


class ReplicaManager:
    def __init__(
        self,
        spu_id: int,
        partitions: Partitions,
        signals: PartitionSignals,
        executor: Executor,
        alter_isr: AlterIsr,
        suspended: Callable[[], bool],
        lease_lapsed: Callable[[], bool] = lambda: False,
    ) -> None:
        self.spu_id = spu_id
        self.partitions = self._partitions = partitions
        self._store = partitions.store
        self._signals = signals
        self.executor = self._executor = executor
        self._meta = ClusterMetadata()
        self.leading = Leadership(
            spu_id,
            partitions,
            signals,
            alter_isr,
            suspended,
            lease_lapsed,
            lambda: self._meta,
            self.history,
            self._spawn,
        )
        self._following: dict[TopicPartition, Follower] = {}
        self._histories: dict[TopicPartition, EpochHistory] = {}
        self._clients: dict[str, AsyncSpuClient] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._producers = partitions.producers
        self.ledger = ReplicatedLedger()
        # A follower copied a commit's last batch: its copy of that staging is not needed.
        self.on_commit_copied: Callable[[TopicPartition, CommitKey], None] = lambda tp, key: None
        self._log_known: set[TopicPartition] = set()  # producers and ledger read from the log
        self._checkpointed: dict[TopicPartition, int] = {}  # high watermarks last written

    # -- state from the controller ---------------------------------------------------------------

    async def apply(self, meta: ClusterMetadata) -> None:
        if meta.version <= self._meta.version:
            return  # nothing changed since the last heartbeat (or an older copy)
        previous, self._meta = self._meta, meta
        local = set(self._store.list_topics())  # a directory listing: no need for a worker
        for name, record in meta.topics.items():
            mine = [n for n, p in enumerate(record.partitions) if self.spu_id in p.replicas]
            if not mine:
                continue
            if name not in local:
                await self._blocking(self._create_local, name, record.config)
            for n in mine:
                await self._apply_partition((name, n), record.partitions[n])
        for name in set(previous.topics) - set(meta.topics):
            await self._drop_topic(name, name in local)

    def _create_local(self, name: str, config: TopicConfig) -> None:
        self._store.create_topic(name, config)
        for n in range(config.partitions):
            self._store.partition(name, n).set_high_watermark(0)  # nothing committed yet, durably

    async def _apply_partition(self, tp: TopicPartition, state: PartitionState) -> None:
        leading = self.leading.current(tp)
        following = self._following.get(tp)
        if state.leader == self.spu_id:
            if leading is None or leading.epoch != state.leader_epoch:
                await self._become_leader(tp, state)
            elif set(state.isr) != leading.isr and leading.pending_isr is None:
                leading.isr = set(state.isr)
                self.leading.high_watermark_moved(tp, leading)
            return
        if leading is not None:
            self.leading.resign(
                tp, f"SPU {self.spu_id} no longer leads {tp[0]}/{tp[1]} (epoch {state.leader_epoch})"
            )
        if following is None or (following.leader, following.epoch) != (state.leader, state.leader_epoch):
            await self._stop_following(tp)
            if state.leader >= 0:
                self._following[tp] = Follower(self, tp, state.leader, state.leader_epoch)

    async def _become_leader(self, tp: TopicPartition, state: PartitionState) -> None:
        await self._stop_following(tp)
        self.leading.resign(tp, f"{tp[0]}/{tp[1]} has a new epoch {state.leader_epoch}")
        part = self._partitions.partition(tp)
        history = self.history(tp)
        await self.know_log(tp, part)
        await self._cut_unfinished_commit(tp, part)
        start = part.log_end_offset
        await self._blocking(history.assign, state.leader_epoch, start)
        part.leader_epoch = state.leader_epoch
        ranges = self._partitions.commit_ranges
        ranges.forget(tp)
        for commit in self.ledger.ranges_after(tp, part.high_watermark):
            ranges.add_closed(tp, commit.start, commit.end)  # not replicated everywhere yet

        def clamp(offset: int) -> int:
            return ranges.visible(tp, offset)

        log.info("leading %s/%d at epoch %d from offset %d", tp[0], tp[1], state.leader_epoch, start)
        self.leading.lead(tp, LeaderState(self.spu_id, part, state.leader_epoch, state.isr, start, clamp))

    async def _drop_topic(self, name: str, exists: bool) -> None:
        for tp in [tp for tp in {*self.leading.led(), *self._following} if tp[0] == name]:
            self.leading.resign(tp, f"topic {name} was deleted")
            await self._stop_following(tp)
            self._histories.pop(tp, None)
            self._log_known.discard(tp)
        if exists:
            await self._blocking(self._store.delete_topic, name)
            self._signals.wake_topic(name)

    async def know_log(self, tp: TopicPartition, part: Partition) -> None:
        """Read the idempotent producers' last batches and the commits from the log (once
        per partition: afterwards appends and copies keep both current)."""
        if tp not in self._log_known:
            await self._blocking(self._read_log, tp, part)
            self._log_known.add(tp)

    def _read_log(self, tp: TopicPartition, part: Partition) -> None:
        with self._producers.lock(tp):
            self._producers.forget(tp)
            self.ledger.forget(tp)
            for header in batch_headers(part):
                self._producers.observe(tp, header)
                self.ledger.observe(tp, header)

    async def _cut_unfinished_commit(self, tp: TopicPartition, part: Partition) -> None:
        """The old leader died while a commit appended: its batches so far go (the client's
        commit failed or fails, and the replayed batch writes them again, once)."""
        start = self.ledger.unfinished_start(tp)
        if start is not None:
            log.warning("%s/%d: cutting an unfinished commit at offset %d", tp[0], tp[1], start)
            await self._blocking(self.truncate, tp, part, start)

    def history(self, tp: TopicPartition) -> EpochHistory:
        found = self._histories.get(tp)
        if found is None:
            part = self._partitions.partition(tp)
            found = self._histories[tp] = EpochHistory(part.directory, part.log_end_offset)
        return found

    async def checkpoint_high_watermarks(self) -> None:
        """Persist the in-memory high watermarks now and then (leaders and followers)."""
        while True:
            await asyncio.sleep(CHECKPOINT_INTERVAL_S)
            tps = [*self.leading.led(), *self._following]
            await self._blocking(self._checkpoint, tps)

    def _checkpoint(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            with contextlib.suppress(Exception):  # deleted meanwhile
                part = self._partitions.partition(tp)
                if self._checkpointed.get(tp) != part.high_watermark:
                    self._checkpointed[tp] = part.high_watermark
                    part.checkpoint_high_watermark()

    def reports(self) -> list[list[Any]]:
        """What the heartbeat tells the controller about each local replica."""
        out: list[list[Any]] = []
        for name, record in self._meta.topics.items():
            for n, state in enumerate(record.partitions):
                if self.spu_id not in state.replicas:
                    continue
                with contextlib.suppress(Exception):
                    info = self._partitions.partition((name, n)).describe()
                    epoch = self.history((name, n)).latest
                    out.append(
                        [
                            name,
                            n,
                            info.log_start_offset,
                            info.log_end_offset,
                            info.high_watermark,
                            epoch,
                            info.size_bytes,
                            info.segment_count,
                        ]
                    )
        return out

    # -- the follower's side (`follower.py` copies) -------------------------------------------------

    async def _stop_following(self, tp: TopicPartition) -> None:
        following = self._following.pop(tp, None)
        if following is not None:
            await following.stop()

    def private_client(self, spu: int) -> AsyncSpuClient | None:
        """A client of another SPU's private port (None: not registered)."""
        record = self._meta.spus.get(spu)
        if record is None:
            return None
        client = self._clients.get(record.private_addr)
        if client is None:
            client = self._clients[record.private_addr] = AsyncSpuClient(
                record.private_addr,
                request_timeout_s=10.0,
                connect_timeout_s=1.0,
                retry=RetryPolicy(attempts=1),
            )
        return client

    def truncate(self, tp: TopicPartition, part: Partition, offset: int) -> None:
        part.truncate_to(offset)
        self.history(tp).truncate_from(part.log_end_offset)
        self._read_log(tp, part)  # the cut batches' sequence numbers and commits are gone too

    def observe_copied(self, tp: TopicPartition, header: BatchHeader) -> None:
        """Worker thread: a batch a follower copied, for the producers' table and the ledger."""
        self._producers.observe(tp, header)
        completed = self.ledger.observe(tp, header)
        if completed is not None:
            self.on_commit_copied(tp, completed)

    # -- plumbing --------------------------------------------------------------------------------

    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for tp in list(self._following):
            await self._stop_following(tp)
        for tp in self.leading.led():
            self.leading.resign(tp, "the SPU is stopping")
        for task in list(self._tasks):
            task.cancel()
        for client in self._clients.values():
            await client.close()
