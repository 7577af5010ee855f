"""The leader's side of replication: per partition (`LeaderState`) follower progress,
the high watermark, the in-sync set and produces waiting for their batch to be
committed; for all the partitions an SPU leads (`Leadership`) what it serves and
refuses, and the in-sync sets it asks the controller to change.

The high watermark is the lowest log end among the in-sync replicas, where the
leader's own end counts only what its flush policy made durable and a
follower's end is what it reported in its last fetch (it fetches from its own
log end, after appending per its flush policy). It never moves backwards, and
never stops inside an exactly-once commit (`clamp`): readers see a partition's
commit whole or not at all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from contraflow.spu.node.partitions import Partitions
from contraflow.spu.node.replication.epochs import EpochHistory
from contraflow.spu.node.signals import PartitionSignals, woken
from contraflow.spu.protocol import Acks, ErrorCode, SpuError
from contraflow.spu.protocol import messages as m
from contraflow.spu.protocol.cluster_metadata import ClusterMetadata
from contraflow.spu.protocol.topics import TopicPartition
from contraflow.spu.rpc.server import Reply
from contraflow.spu.storage.partition import Partition

log = logging.getLogger(__name__)

ISR_CHECK_INTERVAL_S = 0.2
PRODUCE_COMMIT_TIMEOUT_S = 30.0

AlterIsr = Callable[[TopicPartition, int, list[int]], Awaitable[list[int]]]


@dataclass
class FollowerProgress:
    offset: int = -1  # the log end it reported last (-1: not heard from in this epoch)
    caught_up_at: float = field(default_factory=time.monotonic)  # it was at the leader's end then
    end_at_last_fetch: int = 0  # the leader's log end when it answered its previous fetch
    last_fetch_at: float = field(default_factory=time.monotonic)


class LeaderState:
    """Lives on the server's event loop; one per partition this SPU leads (one epoch)."""

    def __init__(
        self,
        spu_id: int,
        partition: Partition,
        epoch: int,
        isr: list[int],
        epoch_start: int,
        clamp: Callable[[int], int] = lambda offset: offset,
    ) -> None:
        self.spu_id = spu_id
        self._clamp = clamp  # moves a candidate high watermark out of unfinished commits
        self.partition = partition
        self.epoch = epoch
        self.epoch_start = epoch_start  # first offset written in this epoch
        self.isr = set(isr)
        self.followers: dict[int, FollowerProgress] = {}
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.pending_isr: set[int] | None = None  # an in-sync change sent to the controller

    def progress(self, replica: int) -> FollowerProgress:
        found = self.followers.get(replica)
        if found is None:
            found = self.followers[replica] = FollowerProgress()
        return found

    def follower_fetched(self, replica: int, offset: int) -> None:
        """A fetch from `offset` says the follower holds everything below it."""
        now = time.monotonic()
        progress = self.progress(replica)
        leo = self.partition.log_end_offset
        if offset >= leo:
            progress.caught_up_at = now
        elif offset >= progress.end_at_last_fetch:
            progress.caught_up_at = progress.last_fetch_at
        progress.offset = offset
        progress.last_fetch_at = now
        progress.end_at_last_fetch = leo

    def wants_to_join(self, replica: int, lag_max_s: float) -> bool:
        """An out-of-sync follower rejoins once it holds everything committed in this epoch
        and is still fetching (a dead one's last position must not bring it back)."""
        progress = self.followers.get(replica)
        return (
            replica not in self.isr
            and progress is not None
            and time.monotonic() - progress.caught_up_at <= lag_max_s / 2
            and progress.offset >= max(self.partition.high_watermark, self.epoch_start)
        )

    def laggards(self, lag_max_s: float) -> set[int]:
        now = time.monotonic()
        return {r for r in self.isr if r != self.spu_id and now - self.progress(r).caught_up_at > lag_max_s}

    def update_high_watermark(self) -> bool:
        """Recompute from the in-sync set; True if it moved (waiters are released)."""
        ends = [self.partition.policy_end]
        for replica in self.isr:
            if replica != self.spu_id:
                ends.append(self.progress(replica).offset)
        candidate = self._clamp(min(ends))
        if candidate <= self.partition.high_watermark:
            return False
        self.partition.set_high_watermark(candidate, persist=False)
        hw = self.partition.high_watermark
        still: list[tuple[int, asyncio.Future[None]]] = []
        for end, future in self._waiters:
            if end <= hw:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((end, future))
        self._waiters = still
        return True

    async def wait_committed(self, end: int, timeout_s: float) -> None:
        """Return once offsets below `end` are committed; NOT_LEADER if leadership is lost."""
        if self.partition.high_watermark >= end:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((end, future))
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for, which may swallow a cancel (3.11)
                await future
        except TimeoutError:
            raise SpuError(
                ErrorCode.TIMEOUT,
                f"{self.partition.topic}/{self.partition.number}: not replicated to the in-sync "
                f"replicas within {timeout_s:.0f}s",
            ) from None

    def resign(self, why: str) -> None:
        """Leadership is gone: every waiting produce fails (its batch may or may not commit)."""
        error = SpuError(ErrorCode.NOT_LEADER, why)
        for _, future in self._waiters:
            if not future.done():
                future.set_exception(error)
        self._waiters = []


@dataclass(eq=False)  # a running thing: identity, not value, equality
class Leadership:
    """The partitions this SPU leads, one `LeaderState` each, and the leader's work for them:
    refusing what it may not serve, produces waiting for the in-sync replicas, followers'
    fetches, and each in-sync set (changes go through the controller). `ReplicaManager`
    makes an SPU lead (`lead`) or stop leading (`resign`) as the controller decides."""

    spu_id: int
    partitions: Partitions
    signals: PartitionSignals
    alter_isr: AlterIsr
    suspended: Callable[[], bool]  # cut off from the controller: it may no longer lead
    lease_lapsed: Callable[[], bool]  # the controller may have replaced it: acks=0/1 refused
    metadata: Callable[[], ClusterMetadata]  # the controller's metadata last applied
    history: Callable[[TopicPartition], EpochHistory]
    spawn: Callable[[Awaitable[None]], None]
    _states: dict[TopicPartition, LeaderState] = field(default_factory=dict, init=False)

    def led(self) -> list[TopicPartition]:
        """Every partition this SPU holds a leader state for (also while it may be fenced)."""
        return list(self._states)

    def current(self, tp: TopicPartition) -> LeaderState | None:
        return self._states.get(tp)

    def lead(self, tp: TopicPartition, state: LeaderState) -> None:
        """Start leading `tp` in `state`'s epoch."""
        self._states[tp] = state
        self.high_watermark_moved(tp, state)

    def resign(self, tp: TopicPartition, why: str) -> None:
        state = self._states.pop(tp, None)
        if state is not None:
            state.resign(why)
            log.info("%s", why)

    def leader(self, tp: TopicPartition) -> LeaderState:
        """The partition's leader state, or NOT_LEADER (also while this SPU may be
        fenced: it was suspended past its session and has not heard the controller since,
        and while a restarted SPU has no metadata yet: a client with an older leader map
        must look again, not be told the topic does not exist)."""
        state = self._states.get(tp)
        if state is None:
            known = self.metadata().version > 0
            if known and self.metadata().partition(*tp) is None and tp[0] not in self.metadata().topics:
                raise SpuError(ErrorCode.UNKNOWN_TOPIC, f"topic {tp[0]!r} does not exist")
            raise SpuError(ErrorCode.NOT_LEADER, f"SPU {self.spu_id} does not lead {tp[0]}/{tp[1]}")
        if self.suspended():
            raise SpuError(
                ErrorCode.NOT_LEADER,
                f"SPU {self.spu_id} was cut off from the controller; it may no longer lead {tp[0]}/{tp[1]}",
            )
        return state

    def led_partitions(self) -> list[TopicPartition]:
        """The partitions this SPU leads now (none while it may be fenced)."""
        return [] if self.suspended() else list(self._states)

    def check_produce(self, tp: TopicPartition, acks: Acks) -> LeaderState:
        state = self.leader(tp)
        self._check_lease(tp, acks)
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
        self.high_watermark_moved(tp, state)
        if acks is Acks.COMMITTED:
            await state.wait_committed(end, PRODUCE_COMMIT_TIMEOUT_S)
        else:
            self._check_lease(tp, acks)  # the append may have outlasted the lease

    def _check_lease(self, tp: TopicPartition, acks: Acks) -> None:
        """A write acknowledged by the leader alone needs the leader's lease (agent.py)."""
        if acks is not Acks.COMMITTED and self.lease_lapsed():
            raise SpuError(
                ErrorCode.NOT_LEADER,
                f"SPU {self.spu_id} has not heard the controller within its session; it may "
                f"no longer lead {tp[0]}/{tp[1]}",
            )

    def high_watermark_moved(self, tp: TopicPartition, state: LeaderState) -> None:
        """Recompute the partition's high watermark; wake its readers if it moved."""
        if state.update_high_watermark():
            self.signals.wake(tp)

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
        self.high_watermark_moved(tp, state)
        if req.offset == part.log_end_offset and req.max_wait_ms > 0:
            await self._wait_for_data(tp, part, req.offset, req.max_wait_ms / 1000)
            state = self._fetch_leader(tp, req.leader_epoch)
        view = self.partitions.read(tp, req.offset, max_bytes, "uncommitted")
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
        self.signals.subscribe(tp, event)
        try:
            if part.log_end_offset == offset:
                await woken(event, wait_s)
        finally:
            self.signals.unsubscribe(tp, event)

    def offset_for_epoch(self, req: m.OffsetForEpochRequest) -> Reply:
        tp = (req.topic, req.partition)
        state = self._fetch_leader(tp, req.leader_epoch)
        epoch, end = self.history(tp).end_offset(req.epoch, state.partition.log_end_offset)
        return Reply({"epoch": epoch, "end_offset": end})

    async def manage_isr(self) -> None:
        """Drop followers that lag longer than the topic allows; take back caught-up ones."""
        while True:
            await asyncio.sleep(ISR_CHECK_INTERVAL_S)
            for tp, state in list(self._states.items()):
                if state.pending_isr is not None:
                    continue
                lag_s = state.partition.config.replica_lag_time_max_ms / 1000
                out = state.laggards(lag_s)
                back = {r for r in self._replicas(tp) if state.wants_to_join(r, lag_s)}
                if out or back:
                    wanted = (state.isr - out) | back
                    state.pending_isr = wanted
                    self.spawn(self._change_isr(tp, state, wanted))

    def _replicas(self, tp: TopicPartition) -> list[int]:
        found = self.metadata().partition(*tp)
        return [] if found is None else found.replicas

    async def _change_isr(self, tp: TopicPartition, state: LeaderState, wanted: set[int]) -> None:
        try:
            isr = await self.alter_isr(tp, state.epoch, sorted(wanted))
            if self._states.get(tp) is state:
                state.isr = set(isr)
                self.high_watermark_moved(tp, state)
        except SpuError as err:
            log.info("in-sync set of %s/%d not changed: %s", tp[0], tp[1], err)
        finally:
            state.pending_isr = None
