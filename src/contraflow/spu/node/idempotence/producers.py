"""The leader's memory of idempotent producers: the last batch each one wrote per partition.

A produce whose batch repeats the last sequence number of its producer is a
retry: it is answered with the offsets recorded the first time and not appended
again; a gap in the sequence is refused (OUT_OF_ORDER_SEQUENCE). The table is
rebuilt from a replica's own log when it starts to lead or follow (`log_scan`),
and kept up to date from every batch a follower copies, so it survives failovers.
Batches written by an exactly-once commit carry a commit mark in the same
header field (`commit_marks.py`) and are not producers' batches.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.protocol.batch import BatchHeader
from contraflow.spu.protocol.commit_marks import TRANSACTIONAL
from contraflow.spu.protocol.idempotence import split_producer_field
from contraflow.spu.protocol.topics import TopicPartition


@dataclass(frozen=True, slots=True)
class LastBatch:
    sequence: int
    base_offset: int
    last_offset: int


class ProducerTable:
    def __init__(self) -> None:
        self._last: dict[tuple[TopicPartition, int], LastBatch] = {}
        self._locks: dict[TopicPartition, threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, tp: TopicPartition) -> threading.Lock:
        """Held across check, append and record of an idempotent batch (worker threads)."""
        with self._guard:
            found = self._locks.get(tp)
            if found is None:
                found = self._locks[tp] = threading.Lock()
            return found

    def duplicate(self, tp: TopicPartition, header: BatchHeader) -> tuple[int, int] | None:
        """The recorded offsets if this batch is a retry of the producer's last one, None if
        it is new; OUT_OF_ORDER_SEQUENCE if it skips sequence numbers or goes back further."""
        ids = split_producer_field(header.producer_id)
        if ids is None:
            return None
        producer, sequence = ids
        last = self._last.get((tp, producer))
        if last is None or sequence == last.sequence + 1:
            return None
        if sequence == last.sequence:
            return last.base_offset, last.last_offset
        raise SpuError(
            ErrorCode.OUT_OF_ORDER_SEQUENCE,
            f"producer {producer} sent sequence {sequence} to {tp[0]}/{tp[1]}, after {last.sequence}",
        )

    def record(self, tp: TopicPartition, producer_field: int, base: int, last: int) -> None:
        ids = split_producer_field(producer_field)
        if ids is not None:
            self._last[(tp, ids[0])] = LastBatch(ids[1], base, last)

    def observe(self, tp: TopicPartition, header: BatchHeader) -> None:
        """A batch in the log (copied, or read back): remember it if a producer numbered it."""
        if not header.attributes & TRANSACTIONAL:
            self.record(tp, header.producer_id, header.base_offset, header.last_offset)

    def forget(self, tp: TopicPartition) -> None:
        """Before `tp` is read back from its log. Caller holds `lock(tp)`."""
        self._last = {k: v for k, v in self._last.items() if k[0] != tp}
