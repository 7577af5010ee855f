"""Exactly-once commits in a cluster: each partition once, at its leader, replicated.

A client commits every partition a batch wrote to at that partition's leader
(TXN_COMMIT naming the partition and how many record batches it staged there).
The leader marks the staged batches with (query, batch id)
(`protocol/commit_marks.py`), appends them contiguously under the partition's
write gate and answers once the in-sync replicas hold all of them (as a produce
with acks=all): from then on the commit is in every in-sync replica's log, and
so in its ledger (`log_ledger.py`). A commit the partition's log already holds (a
retry after a lost answer, a replay after a failover) appends nothing and
answers where it ended. The leader copies every stage request to its in-sync
followers before answering it (REPLICA_STAGE), so a follower elected between a
batch's staging and its commit can commit it; staging that is lost all the same
(a follower that missed part of it) fails the commit with UNKNOWN_TRANSACTION
before anything is written: the batch fails cleanly and is replayed. A batch that writes to partitions of several leaders is therefore
never written twice, but readers may see it in one partition before another.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar

from contraflow.spu.client.aio import AsyncSpuClient
from contraflow.spu.node.exactly_once.log_ledger import CommitKey, ReplicatedLedger
from contraflow.spu.node.exactly_once.transactions import TransactionCoordinator
from contraflow.spu.node.partitions import Partitions
from contraflow.spu.protocol import Acks, ApiKey, ErrorCode, SpuError
from contraflow.spu.protocol import messages as m
from contraflow.spu.protocol.batch import BatchHeader
from contraflow.spu.protocol.commit_marks import MAX_BATCH_ID, mark_batch, query_hash
from contraflow.spu.protocol.topics import TopicPartition
from contraflow.spu.storage.partition import Partition

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionCommit:
    end_offset: int
    already_committed: bool


class LeaderView(Protocol):
    """What a commit reads of a partition's leader state."""

    isr: set[int]
    partition: Partition


class Leading(Protocol):
    """What commits need of the partitions this SPU leads (`replication.leader.Leadership`)."""

    def leader(self, tp: TopicPartition) -> Any: ...

    def check_produce(self, tp: TopicPartition, acks: Acks) -> Any: ...

    async def appended(self, tp: TopicPartition, state: Any, end: int, acks: Acks) -> None: ...

    def led_partitions(self) -> list[TopicPartition]: ...


class Replicas(Protocol):
    """What commits need of the SPU's replicas (`replication.replicas.ReplicaManager`): the
    commits sit below replication, which only hands itself in."""

    spu_id: int
    ledger: ReplicatedLedger
    on_commit_copied: Callable[[TopicPartition, CommitKey], None]

    @property
    def leading(self) -> Leading: ...

    def private_client(self, spu: int) -> AsyncSpuClient | None: ...


class ClusterCommits:
    """Lives on the server's event loop; appends run in the executor."""

    def __init__(
        self,
        transactions: TransactionCoordinator,
        partitions: Partitions,
        replicas: Replicas,
        executor: Executor,
    ) -> None:
        self._txns = transactions
        self._partitions = partitions
        self._replicas = replicas
        self._executor = executor
        self._turns: dict[TopicPartition, asyncio.Lock] = {}  # one commit per partition at a time
        replicas.on_commit_copied = self._drop_copied_staging

    @property
    def _ledger(self) -> ReplicatedLedger:
        return self._replicas.ledger

    def check_stage(self, producer_id: str, batch_id: int, tp: TopicPartition) -> None:
        """Staging goes to the partition's leader, with a batch id a commit mark can hold."""
        _check_batch_id(batch_id)
        self._replicas.leading.leader(tp)

    async def copy_staging(self, tp: TopicPartition, req: m.TxnStageRequest, payload: memoryview) -> None:
        """Hand a stage request to every in-sync follower and wait for them, as long as a
        follower may lag before it leaves the in-sync set (one that fails or is slower only
        lacks the copy: were it elected, the commit would fail cleanly)."""
        state: LeaderView = self._replicas.leading.leader(tp)
        fields = dataclasses.asdict(req)
        followers = [r for r in state.isr if r != self._replicas.spu_id]
        clients = [self._replicas.private_client(r) for r in followers]
        wait_s = state.partition.config.replica_lag_time_max_ms / 1000
        copies = (_copy(c, fields, payload, wait_s) for c in clients)
        results = await asyncio.gather(*copies, return_exceptions=True)
        for follower, result in zip(followers, results, strict=True):
            if isinstance(result, BaseException):
                log.info("staging of %s/%d not copied to SPU %d: %s", tp[0], tp[1], follower, result)

    def _drop_copied_staging(self, tp: TopicPartition, key: CommitKey) -> None:
        """Worker thread: a follower copied a commit; its copy of the commit's staging goes."""
        for producer_id, batch_id in self._txns.pending_batches():
            if batch_id == key[1] and query_hash(producer_id) == key[0]:
                self._txns.take_partition(producer_id, batch_id, tp)

    async def commit(
        self, producer_id: str, batch_id: int, tp: TopicPartition, expected_batches: int | None
    ) -> PartitionCommit:
        _check_batch_id(batch_id)
        leader = self._replicas.leading.check_produce(tp, Acks.COMMITTED)
        async with self._turns.setdefault(tp, asyncio.Lock()):
            found = self._ledger.committed(tp, producer_id, batch_id)
            if found is not None:
                self._txns.take_partition(producer_id, batch_id, tp)  # a replay's staging: not needed
                end, already = found.end, True
            else:
                staged = self._txns.take_partition(producer_id, batch_id, tp)
                if not staged or (expected_batches is not None and len(staged) != expected_batches):
                    raise SpuError(
                        ErrorCode.UNKNOWN_TRANSACTION,
                        f"batch {batch_id} of producer {producer_id!r}: {len(staged)} record batches "
                        f"staged for {tp[0]}/{tp[1]}, {expected_batches} expected (staging lost to a "
                        "leader change, a restart or a timeout); replay the batch",
                    )
                end = await self._blocking(self._append, tp, producer_id, batch_id, staged)
                already = False
            if self._replicas.leading.leader(tp) is not leader:
                raise SpuError(ErrorCode.NOT_LEADER, f"{tp[0]}/{tp[1]} changed leader during the commit")
            await self._replicas.leading.appended(tp, leader, end, Acks.COMMITTED)
        return PartitionCommit(end, already)

    def _append(
        self, tp: TopicPartition, producer_id: str, batch_id: int, staged: list[bytes | memoryview]
    ) -> int:
        """Worker thread: the marked batches, contiguous, one fsync; the end offset."""
        partitions = self._partitions
        with partitions.locked([tp]):
            partitions.fence(tp, partitions.log_end(tp))
            for n, data in enumerate(staged):
                marked = mark_batch(data, producer_id, batch_id, last=n == len(staged) - 1)
                base, _ = partitions.append_unsynced(tp, memoryview(marked))
                self._ledger.observe(tp, dataclasses.replace(BatchHeader.parse(marked), base_offset=base))
            partitions.sync(tp)
            end = partitions.log_end(tp)
            partitions.publish(tp)
        return end

    def ledger(
        self, producer_id: str, batch_id: int
    ) -> tuple[dict[TopicPartition, int], list[TopicPartition]]:
        """Where the batch's commits end in the partitions this SPU leads (committed ones
        only: below the high watermark), and which partitions those are."""
        led = self._replicas.leading.led_partitions()
        ranges = self._partitions.commit_ranges
        below = {tp: ranges.visible(tp, self._partitions.partition(tp).high_watermark) for tp in led}
        return self._ledger.ends(producer_id, batch_id, led, below), led

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)


async def _copy(
    client: AsyncSpuClient | None, fields: dict[str, Any], payload: memoryview, within_s: float
) -> None:
    """One follower's copy of a stage request, given up after `within_s` (`asyncio.timeout`:
    3.11's `wait_for` could swallow the cancel of a commit being stopped)."""
    if client is None:
        raise SpuError(ErrorCode.NOT_LEADER, "not registered with the controller")
    async with asyncio.timeout(within_s):
        await client.request(ApiKey.REPLICA_STAGE, fields, [payload])


def _check_batch_id(batch_id: int) -> None:
    if not 0 <= batch_id <= MAX_BATCH_ID:
        raise SpuError(
            ErrorCode.INVALID_ARGUMENT, f"a cluster commits batch ids 0..{MAX_BATCH_ID}, not {batch_id}"
        )
