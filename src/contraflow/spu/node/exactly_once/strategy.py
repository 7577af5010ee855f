"""One interface for exactly-once commits, two strategies, chosen once when the SPU starts.

A lone SPU commits a batch atomically across all its partitions (journalled in
`journal.py`): a committed reader sees all of a batch or none of it, in every
partition at once, and flows on one machine rely on that. A cluster commits each
partition at its leader (`replicated.py`), so a reader may see a batch in one
partition before another. Being a cluster of one would lose the lone SPU's
cross-partition atomicity, so both strategies sit behind `ExactlyOnce`; the
protocol's handlers never ask which one they have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import Any, Protocol

from contraflow.spu.node.exactly_once.replicated import ClusterCommits
from contraflow.spu.node.exactly_once.transactions import TransactionCoordinator
from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.protocol import messages as m
from contraflow.spu.protocol.topics import TopicPartition


class ExactlyOnce(Protocol):
    """What TXN_STAGE, TXN_COMMIT and TXN_LEDGER need beyond the staging itself."""

    def check_stage(self, producer_id: str, batch_id: int, tp: TopicPartition) -> None:
        """Refuse staging this SPU could not commit (before anything is staged)."""

    async def staged(self, tp: TopicPartition, req: m.TxnStageRequest, payload: memoryview) -> None:
        """After staging here: whatever else must hold a copy before the stage is answered."""

    async def commit(self, req: m.TxnCommitRequest) -> dict[str, Any]:
        """Commit the staged batch; the answer's fields."""

    def ledger(self, producer_id: str, batch_id: int) -> dict[str, Any]:
        """Where the batch's commits end, as the answer's fields."""


def listed(ends: Mapping[TopicPartition, int]) -> list[list[Any]]:
    """End offsets as the wire lists them: `[[topic, partition, offset], ...]`, sorted."""
    return [[t, p, o] for (t, p), o in sorted(ends.items())]


class LoneCommits:
    """A lone SPU: one atomic, journalled commit of every partition the batch staged to."""

    def __init__(self, transactions: TransactionCoordinator, executor: Executor) -> None:
        self._txns = transactions
        self._executor = executor

    def check_stage(self, producer_id: str, batch_id: int, tp: TopicPartition) -> None:
        """Any batch id and partition can be staged on a lone SPU."""

    async def staged(self, tp: TopicPartition, req: m.TxnStageRequest, payload: memoryview) -> None:
        """No other SPU keeps a copy."""

    async def commit(self, req: m.TxnCommitRequest) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        txns = self._txns
        result = await loop.run_in_executor(
            self._executor, txns.commit, req.producer_id, req.batch_id, req.expected_batches
        )
        return {"end_offsets": listed(result.end_offsets), "already_committed": result.already_committed}

    def ledger(self, producer_id: str, batch_id: int) -> dict[str, Any]:
        ends = self._txns.ledger(producer_id, batch_id)
        return {"end_offsets": None if ends is None else listed(ends)}


class PartitionedCommits:
    """A cluster: each partition committed once, at its leader, replicated (`ClusterCommits`)."""

    def __init__(self, commits: ClusterCommits) -> None:
        self._commits = commits

    def check_stage(self, producer_id: str, batch_id: int, tp: TopicPartition) -> None:
        self._commits.check_stage(producer_id, batch_id, tp)

    async def staged(self, tp: TopicPartition, req: m.TxnStageRequest, payload: memoryview) -> None:
        """The in-sync followers keep a copy: a new leader can commit it."""
        await self._commits.copy_staging(tp, req, payload)

    async def commit(self, req: m.TxnCommitRequest) -> dict[str, Any]:
        """Each named partition committed at this SPU, its leader; the first failure is raised
        (the others stay committed: a retry commits only what is missing)."""
        if not req.partitions:
            raise SpuError(
                ErrorCode.INVALID_ARGUMENT,
                "an SPU cluster commits partition by partition, at their leaders: name the partitions",
            )
        named = [((str(t), int(p)), int(n)) for t, p, n in req.partitions]
        done = await asyncio.gather(
            *(self._commits.commit(req.producer_id, req.batch_id, tp, n) for tp, n in named),
            return_exceptions=True,
        )
        failed = next((d for d in done if isinstance(d, BaseException)), None)
        if failed is not None:
            raise failed
        commits = [d for d in done if not isinstance(d, BaseException)]
        return {
            "end_offsets": listed({tp: c.end_offset for (tp, _), c in zip(named, commits, strict=True)}),
            "already_committed": all(c.already_committed for c in commits),
        }

    def ledger(self, producer_id: str, batch_id: int) -> dict[str, Any]:
        """What this SPU's led partitions say; the client asks every leader."""
        found, led = self._commits.ledger(producer_id, batch_id)
        return {"end_offsets": listed(found) if found else None, "led": [[t, p] for t, p in sorted(led)]}
