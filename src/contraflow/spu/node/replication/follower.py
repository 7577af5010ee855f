"""The follower's side of one partition: copy the leader's log, batch for batch.

A follower first cuts its log back to where its epoch history and the leader's
diverge (KIP-101/279: the leader says where the latest epoch both know ends in
its log), then fetches from the leader's private port from its own log end,
appending the batches as they are (offsets and epochs kept). What it copies
also feeds the idempotent producers' table and the batch ledger
(`ReplicaManager.observe_copied`), so the replica can lead at any moment. It
also follows the leader's log start (a compacted table's, or retention's): it
drops its segments wholly before it, and a log that ends before it starts over
there. The leader's side is `leader.py` and `replicas.py`.
"""

from __future__ import annotations

import asyncio
import io
import logging
from concurrent.futures import Executor
from typing import Any, Protocol

from contraflow.spu.client.aio import AsyncSpuClient
from contraflow.spu.node.partitions import Partitions, split_batches
from contraflow.spu.node.replication.epochs import NO_EPOCH, EpochHistory
from contraflow.spu.protocol import ApiKey, ErrorCode, SpuError
from contraflow.spu.protocol.batch import BatchHeader
from contraflow.spu.protocol.topics import TopicPartition
from contraflow.spu.rpc.client import Response
from contraflow.spu.storage.partition import Partition

log = logging.getLogger(__name__)

FOLLOWER_BACKOFF_S = 0.1
STOP_WARNING_S = 5.0  # a follower's stop this slow is logged with where it waits


class Replicas(Protocol):
    """What a follower uses of its SPU's replicas (`replicas.ReplicaManager`)."""

    spu_id: int
    partitions: Partitions
    executor: Executor

    def history(self, tp: TopicPartition) -> EpochHistory: ...

    def private_client(self, spu: int) -> AsyncSpuClient | None: ...

    async def know_log(self, tp: TopicPartition, part: Partition) -> None: ...

    def truncate(self, tp: TopicPartition, part: Partition, offset: int) -> None: ...

    def observe_copied(self, tp: TopicPartition, header: BatchHeader) -> None: ...


class Follower:
    """Follows `tp` of `leader` at `epoch` until stopped (a new leader or epoch, a deletion)."""

    def __init__(self, replicas: Replicas, tp: TopicPartition, leader: int, epoch: int) -> None:
        self.leader = leader
        self.epoch = epoch
        self._replicas = replicas
        self._tp = tp
        self._appending: asyncio.Future[Any] | None = None
        self.task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        """Cancel the copying and wait until it has ended, and with it an append already in a
        worker thread: the caller may write the log next (it leads now, or truncates). A
        cancellation of the caller itself goes on up (`asyncio.wait` raises nothing else)."""
        self.task.cancel()
        ending = [self.task] if self._appending is None else [self.task, self._appending]
        _done, pending = await asyncio.wait(ending, timeout=STOP_WARNING_S)
        if pending:  # a hang here holds the metadata apply: say where the follower waits
            where = io.StringIO()
            self.task.print_stack(file=where)
            tp = self._tp
            log.warning(
                "%s/%d: follower not stopped after %ss: %s", tp[0], tp[1], STOP_WARNING_S, where.getvalue()
            )
            await asyncio.wait(pending)
        if not self.task.cancelled() and self.task.exception() is not None:
            log.warning("following %s/%d ended with %r", self._tp[0], self._tp[1], self.task.exception())

    async def _follow(self) -> None:
        tp, leader, epoch, replicas = self._tp, self.leader, self.epoch, self._replicas
        part = replicas.partitions.partition(tp)
        replicas.partitions.commit_ranges.forget(tp)  # the leader keeps them
        await replicas.know_log(tp, part)
        truncated = False
        while True:
            client = replicas.private_client(leader)
            try:
                if client is None:
                    raise SpuError(ErrorCode.NOT_LEADER, f"SPU {leader} is not registered")
                if not truncated:
                    await self._truncate_to_leader(part, client)
                    truncated = True
                fields = {
                    "topic": tp[0],
                    "partition": tp[1],
                    "offset": part.log_end_offset,
                    "replica_id": replicas.spu_id,
                    "leader_epoch": epoch,
                }
                response = await client.request(ApiKey.REPLICA_FETCH, fields)
                await self._copy(part, response)
            except SpuError as err:
                if err.code is ErrorCode.OFFSET_OUT_OF_RANGE:
                    truncated = False
                log.debug("following %s/%d from SPU %d: %s", tp[0], tp[1], leader, err)
                await asyncio.sleep(FOLLOWER_BACKOFF_S)
            except Exception:
                # Anything else (a local write failing, say) must not end the copying for good:
                # the replica would stay out of sync until the leader changes.
                log.exception("following %s/%d from SPU %d failed; starting over", tp[0], tp[1], leader)
                truncated = False
                await asyncio.sleep(FOLLOWER_BACKOFF_S)

    async def _truncate_to_leader(self, part: Partition, client: AsyncSpuClient) -> None:
        """Cut the local log back to where it agrees with the leader's (KIP-101/279):
        the leader says where the latest epoch we both know ends in its log."""
        tp = self._tp
        history = self._replicas.history(tp)
        latest = history.latest
        if latest == NO_EPOCH:
            return
        fields = {"topic": tp[0], "partition": tp[1], "epoch": latest, "leader_epoch": self.epoch}
        answer = (await client.request(ApiKey.OFFSET_FOR_EPOCH, fields)).fields
        leader_epoch, leader_end = int(answer["epoch"]), int(answer["end_offset"])
        leo = part.log_end_offset
        if leader_epoch == NO_EPOCH:
            target = part.log_start_offset
        elif leader_epoch == latest:
            target = min(leader_end, leo)
        else:
            target = min(leader_end, history.end_offset(leader_epoch, leo)[1])
        if target < leo:
            log.warning(
                "%s/%d: truncating from %d to %d (diverged from the leader at epoch %d)",
                tp[0],
                tp[1],
                leo,
                target,
                leader_epoch,
            )
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._replicas.executor, self._replicas.truncate, tp, part, target)

    async def _copy(self, part: Partition, response: Response) -> None:
        payload = response.payload
        await self._start_where_the_leader_starts(part, int(response.fields["log_start_offset"]))
        if len(payload):
            batches = split_batches(payload, verify=False)
            loop = asyncio.get_running_loop()
            busy = loop.run_in_executor(self._replicas.executor, self._append, part, batches)
            self._appending = busy
            await asyncio.shield(busy)
        hw = int(response.fields["high_watermark"])
        part.set_high_watermark(min(hw, part.log_end_offset), persist=False)

    async def _start_where_the_leader_starts(self, part: Partition, leader_start: int) -> None:
        """What the leader's log no longer holds goes here too (a compacted table's log): a log
        that ends before the leader's starts begins again there, else the segments wholly
        before it are dropped."""
        if leader_start <= part.log_start_offset:
            return
        loop = asyncio.get_running_loop()
        if leader_start > part.log_end_offset:
            log.info(
                "%s/%d: the leader's log starts at %d, past ours", self._tp[0], self._tp[1], leader_start
            )
            await loop.run_in_executor(self._replicas.executor, part.restart_at, leader_start)
        elif part.closed_before(leader_start):
            await loop.run_in_executor(self._replicas.executor, part.drop_before, leader_start)

    def _append(self, part: Partition, batches: list[memoryview]) -> None:
        """Copy a fetch's batches; under an every-batch flush policy one fsync covers them
        all (before the next fetch tells the leader they are here)."""
        history = self._replicas.history(self._tp)
        one_fsync = part.config.flush.mode == "every_batch"
        for batch in batches:
            header = BatchHeader.parse(batch)
            if header.next_offset <= part.log_end_offset:
                continue  # already here (the leader answers from a batch boundary)
            if header.leader_epoch > history.latest:
                history.assign(header.leader_epoch, header.base_offset)
            part.append_encoded(batch, assign_offsets=False, wait_durable=not one_fsync)
            self._replicas.observe_copied(self._tp, header)
        if one_fsync:
            part.flush()
