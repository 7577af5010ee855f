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

from contraflow.spu.protocol.batch import HAS_KEYS, KEY_NULLS, BatchHeader
from contraflow.spu.protocol.compression import Compression

# Smaller batches are joined with their neighbours when routed: each costs an output batch (and,
# fetched by a sink task, a Spark row and a stage request).
MIN_RECORDS = 2_048


def kept_whole(header: BatchHeader, start: int, end: int) -> bool:
    """Whether a routed copy of the records [start, end) keeps this batch as it is but for its
    header: all its records in the range, no keys, uncompressed, not small. The one rule for
    the SPU's copy (`server.range_stage`) and a sink task's (`spark.log_envelopes`)."""
    return (
        header.base_offset >= start
        and header.next_offset <= end
        and header.compression is Compression.NONE
        and not header.attributes & (HAS_KEYS | KEY_NULLS)
        and header.record_count >= MIN_RECORDS
    )


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
