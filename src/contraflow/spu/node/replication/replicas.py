"""An SPU's replicas: which partitions it leads or follows, and the leader's work.

`apply(metadata)` (after every heartbeat) makes the local state match what the
controller decided: it creates local copies of new topics, turns a partition's
replica into the leader at a new epoch (recording where the epoch starts), or
into a follower of another SPU (`follower.py`: truncate to where the epoch
histories diverge, then copy from the leader's private port). As the leader it serves those fetches, keeps the high watermark and the
in-sync set (changes go through the controller), and fails waiting produces
when it stops leading. Both roles keep the idempotent producers' table and the
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
from contraflow.spu.node.replication.leader import LeaderState
from contraflow.spu.node.signals import PartitionSignals
from contraflow.spu.protocol import Acks, ErrorCode, SpuError
from contraflow.spu.protocol import messages as m
from contraflow.spu.protocol.batch import BatchHeader
from contraflow.spu.protocol.cluster_metadata import ClusterMetadata, PartitionState
from contraflow.spu.protocol.topics import TopicConfig, TopicPartition
from contraflow.spu.rpc.client import RetryPolicy
from contraflow.spu.rpc.server import Reply
from contraflow.spu.storage.partition import Partition

log = logging.getLogger(__name__)

ISR_CHECK_INTERVAL_S = 0.2
CHECKPOINT_INTERVAL_S = 1.0
PRODUCE_COMMIT_TIMEOUT_S = 30.0

AlterIsr = Callable[[TopicPartition, int, list[int]], Awaitable[list[int]]]


class ReplicaManager:
    def __init__(
        self,
        spu_id: int,
        partitions: Partitions,
        signals: PartitionSignals,
        executor: Executor,
        alter_isr: AlterIsr,
        suspended: Callable[[], bool],
    ) -> None:
        self.spu_id = spu_id
        self.partitions = self._partitions = partitions
        self._store = partitions.store
        self._signals = signals
        self.executor = self._executor = executor
        self._alter_isr = alter_isr
        self._suspended = suspended
        self._meta = ClusterMetadata()
        self._leaders: dict[TopicPartition, LeaderState] = {}
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
        leading = self._leaders.get(tp)
        following = self._following.get(tp)
        if state.leader == self.spu_id:
            if leading is None or leading.epoch != state.leader_epoch:
                await self._become_leader(tp, state)
            elif set(state.isr) != leading.isr and leading.pending_isr is None:
                leading.isr = set(state.isr)
                self._high_watermark_moved(tp, leading)
            return
        if leading is not None:
            self._resign(
                tp, f"SPU {self.spu_id} no longer leads {tp[0]}/{tp[1]} (epoch {state.leader_epoch})"
            )
        if following is None or (following.leader, following.epoch) != (state.leader, state.leader_epoch):
            await self._stop_following(tp)
            if state.leader >= 0:
                self._following[tp] = Follower(self, tp, state.leader, state.leader_epoch)

    async def _become_leader(self, tp: TopicPartition, state: PartitionState) -> None:
        await self._stop_following(tp)
        old = self._leaders.pop(tp, None)
        if old is not None:
            old.resign(f"{tp[0]}/{tp[1]} has a new epoch {state.leader_epoch}")
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

        self._leaders[tp] = LeaderState(self.spu_id, part, state.leader_epoch, state.isr, start, clamp)
        log.info("leading %s/%d at epoch %d from offset %d", tp[0], tp[1], state.leader_epoch, start)
        self._high_watermark_moved(tp, self._leaders[tp])

    def _resign(self, tp: TopicPartition, why: str) -> None:
        state = self._leaders.pop(tp, None)
        if state is not None:
            state.resign(why)
            log.info("%s", why)

    async def _drop_topic(self, name: str, exists: bool) -> None:
        for tp in [tp for tp in {*self._leaders, *self._following} if tp[0] == name]:
            self._resign(tp, f"topic {name} was deleted")
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

    # -- the leader's side -----------------------------------------------------------------------

    def leader(self, tp: TopicPartition) -> LeaderState:
        """The partition's leader state, or NOT_LEADER (also while this SPU may be
        fenced: it was suspended past its session and has not heard the controller since,
        and while a restarted SPU has no metadata yet: a client with an older leader map
        must look again, not be told the topic does not exist)."""
        state = self._leaders.get(tp)
        if state is None:
            known = self._meta.version > 0
            if known and self._meta.partition(*tp) is None and tp[0] not in self._meta.topics:
                raise SpuError(ErrorCode.UNKNOWN_TOPIC, f"topic {tp[0]!r} does not exist")
            raise SpuError(ErrorCode.NOT_LEADER, f"SPU {self.spu_id} does not lead {tp[0]}/{tp[1]}")
        if self._suspended():
            raise SpuError(
                ErrorCode.NOT_LEADER,
                f"SPU {self.spu_id} was cut off from the controller; it may no longer lead {tp[0]}/{tp[1]}",
            )
        return state

    def led_partitions(self) -> list[TopicPartition]:
        """The partitions this SPU leads now (none while it may be fenced)."""
        return [] if self._suspended() else list(self._leaders)

    def check_produce(self, tp: TopicPartition, acks: Acks) -> LeaderState:
        state = self.leader(tp)
        config = state.partition.config
        if acks is Acks.COMMITTED and len(state.isr) < config.min_in_sync_replicas:
            raise SpuError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"{tp[0]}/{tp[1]} has {len(state.isr)} in-sync replica(s) {sorted(state.isr)}, "
                f"fewer than min_in_sync_replicas={config.min_in_sync_replicas}",
            )
        return state

    async def appended(self, tp: TopicPartition, state: LeaderState, end: int, acks: Acks) -> None:
        """After the leader's append: move the high watermark; with acks=all wait for it."""
        self._high_watermark_moved(tp, state)
        if acks is Acks.COMMITTED:
            await state.wait_committed(end, PRODUCE_COMMIT_TIMEOUT_S)

    def _high_watermark_moved(self, tp: TopicPartition, state: LeaderState) -> None:
        if state.update_high_watermark():
            self._signals.wake(tp)

    async def replica_fetch(self, req: m.ReplicaFetchRequest, max_bytes: int) -> Reply:
        tp = (req.topic, req.partition)
        state = self._fetch_leader(tp, req.leader_epoch)
        part = state.partition
        if req.offset > part.log_end_offset:
            raise SpuError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"replica {req.replica_id} fetches {tp[0]}/{tp[1]} from {req.offset}, past the "
                f"leader's end {part.log_end_offset}: it must truncate first",
            )
        state.follower_fetched(req.replica_id, req.offset)
        self._high_watermark_moved(tp, state)
        if req.offset == part.log_end_offset and req.max_wait_ms > 0:
            await self._wait_for_data(tp, part, req.offset, req.max_wait_ms / 1000)
            state = self._fetch_leader(tp, req.leader_epoch)
        view = self._partitions.read(tp, req.offset, max_bytes, "uncommitted")
        state.progress(req.replica_id).end_at_last_fetch = part.log_end_offset
        return Reply({**view.fields(), "leader_epoch": state.epoch}, view.parts)

    def _fetch_leader(self, tp: TopicPartition, epoch: int) -> LeaderState:
        state = self.leader(tp)
        if epoch != state.epoch:
            raise SpuError(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"{tp[0]}/{tp[1]}: the fetch follows epoch {epoch}, this leader is at {state.epoch}",
            )
        return state

    async def _wait_for_data(self, tp: TopicPartition, part: Partition, offset: int, wait_s: float) -> None:
        event = asyncio.Event()
        self._signals.subscribe(tp, event)
        try:
            if part.log_end_offset == offset:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):  # not wait_for, which may swallow a cancel
                        await event.wait()
        finally:
            self._signals.unsubscribe(tp, event)

    def offset_for_epoch(self, req: m.OffsetForEpochRequest) -> Reply:
        tp = (req.topic, req.partition)
        state = self._fetch_leader(tp, req.leader_epoch)
        epoch, end = self.history(tp).end_offset(req.epoch, state.partition.log_end_offset)
        return Reply({"epoch": epoch, "end_offset": end})

    async def manage_isr(self) -> None:
        """Drop followers that lag longer than the topic allows; take back caught-up ones."""
        while True:
            await asyncio.sleep(ISR_CHECK_INTERVAL_S)
            for tp, state in list(self._leaders.items()):
                if state.pending_isr is not None:
                    continue
                lag_s = state.partition.config.replica_lag_time_max_ms / 1000
                out = state.laggards(lag_s)
                back = {r for r in self._replicas(tp) if state.wants_to_join(r, lag_s)}
                if out or back:
                    wanted = (state.isr - out) | back
                    state.pending_isr = wanted
                    self._spawn(self._change_isr(tp, state, wanted))

    def _replicas(self, tp: TopicPartition) -> list[int]:
        found = self._meta.partition(*tp)
        return [] if found is None else found.replicas

    async def _change_isr(self, tp: TopicPartition, state: LeaderState, wanted: set[int]) -> None:
        try:
            isr = await self._alter_isr(tp, state.epoch, sorted(wanted))
            if self._leaders.get(tp) is state:
                state.isr = set(isr)
                self._high_watermark_moved(tp, state)
        except SpuError as err:
            log.info("in-sync set of %s/%d not changed: %s", tp[0], tp[1], err)
        finally:
            state.pending_isr = None

    async def checkpoint_high_watermarks(self) -> None:
        """Persist the in-memory high watermarks now and then (leaders and followers)."""
        while True:
            await asyncio.sleep(CHECKPOINT_INTERVAL_S)
            tps = [*self._leaders, *self._following]
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
        for tp in list(self._leaders):
            self._resign(tp, "the SPU is stopping")
        for task in list(self._tasks):
            task.cancel()
        for client in self._clients.values():
            await client.close()
