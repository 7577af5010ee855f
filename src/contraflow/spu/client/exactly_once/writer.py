"""Exactly-once writing of one micro-batch, split the way Spark splits it.

Each task (executor side) stages its records through a `BatchWriter` and hands
the driver a `StagedWork` (picklable: it travels in Spark's commit message);
the driver commits the whole batch with `commit_batch`. The writer numbers its
stage requests (a resent request is a no-op on the SPU), identifies itself by
writer name and attempt (a retried task replaces its failed attempt's staging),
and counts its batches per partition so the commit can tell a complete batch
from one whose staging was lost (then it fails, and the micro-batch is
replayed); each partition's leader commits it with its count (`commits`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Unpack

from contraflow.spu.protocol.batch import RecordFields, encode_batch
from contraflow.spu.protocol.compression import Compression
from contraflow.spu.protocol.topics import TopicPartition
from contraflow.spu.rpc.client import Buffer

if TYPE_CHECKING:  # the client's commits live in this package too: no import loop at run time
    from contraflow.spu.client.sync import SpuClient


@dataclass(frozen=True)
class StagedWork:
    """What one writer staged: sent to whoever commits."""

    writer: str
    attempt: int
    batches: int
    partitions: dict[TopicPartition, int] = field(default_factory=dict)  # batches per partition


@dataclass(eq=False)  # a writer with state: identity, not value, equality
class BatchWriter:
    """One task's staging of records for micro-batch `batch_id` of `producer_id`."""

    client: SpuClient
    producer_id: str
    batch_id: int
    _: KW_ONLY
    writer: str
    attempt: int = 0
    compression: Compression | str | None = None
    # Stage requests sent so far (the SPU ignores a resent one by its sequence number).
    sequence: int = field(default=0, init=False)
    # The SPU said the batch was committed before (a replay): nothing more to stage.
    already_committed: bool = field(default=False, init=False)
    staged: Counter[TopicPartition] = field(default_factory=Counter, init=False)

    def write(
        self, topic: str, partition: int, values: Sequence[Buffer], **fields: Unpack[RecordFields]
    ) -> None:
        """Stage records as one batch (nothing is visible before the commit)."""
        if not values or self.already_committed:
            return
        batch = encode_batch(values, **fields, compression=self.compression)
        staged = self.client.stage(
            self.producer_id,
            self.batch_id,
            topic,
            partition,
            batch,
            writer=self.writer,
            attempt=self.attempt,
            sequence=self.sequence,
        )
        self.sequence += 1
        self.staged[(topic, partition)] += 1
        self.already_committed = not staged  # a replay of a committed batch: skip the rest

    def done(self) -> StagedWork:
        if self.already_committed:
            return StagedWork(self.writer, self.attempt, 0)
        return StagedWork(self.writer, self.attempt, self.sequence, dict(self.staged))


def commit_batch(
    client: SpuClient, producer_id: str, batch_id: int, work: Iterable[StagedWork]
) -> dict[TopicPartition, int]:
    """Commit what the writers staged, atomically and at most once; the end offsets.

    Only the final attempt of each writer counts (what the caller collected from
    successful tasks). A batch id that was committed before answers with the
    recorded offsets whatever was staged now."""
    work = list(work)
    partitions: Counter[TopicPartition] = Counter()
    for w in work:
        partitions.update(w.partitions)
    expected = sum(w.batches for w in work)
    return client.commit(producer_id, batch_id, expected_batches=expected, partitions=dict(partitions))
