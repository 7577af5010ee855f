"""Staging by reference: a writer asks the SPU to stage records it already holds.

A routing-only pipeline's sink task used to fetch a range of its input
channel from the SPU and send the same bytes straight back as a stage
request. `TXN_STAGE_RANGE` names the range instead (`source_topic`,
`source_partition`, offsets [`start`, `end`)), and the SPU copies those log
batches into the writer's transaction itself: the events' bytes never leave
the SPU. The reply says how many record batches it staged (`batches`, what
the writer counts towards the commit's `expected_batches`), their `bytes` and
the `records` they hold.

The other fields are `TXN_STAGE`'s (`TxnStageRequest`): the transaction, the
destination partition, and the writer's attempt and request number.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TxnStageRangeRequest:
    """No payload: the records of [start, end) of `source_topic`/`source_partition`, staged for
    (producer_id, batch_id, topic, partition)."""

    producer_id: str
    batch_id: int
    topic: str
    partition: int
    source_topic: str
    source_partition: int
    start: int
    end: int
    writer: str = ""
    attempt: int = 0
    sequence: int | None = None
