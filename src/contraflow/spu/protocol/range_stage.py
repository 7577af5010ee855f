"""Staging by reference: a writer asks the SPU to stage records it already holds.

A routing-only pipeline's sink task used to fetch a range of its input
channel from the SPU and send the same bytes straight back as a stage
request. `TXN_STAGE_RANGE` names the range instead (`source_topic`,
`source_partition`, offsets [`start`, `end`)), and the SPU copies those log
batches into the writer's transaction itself: the events' bytes never leave
the SPU. The reply says how many record batches it staged (`batches`, what
the writer counts towards the commit's `expected_batches`), their `bytes` and
the `records` they hold.

The request (`messages.TxnStageRangeRequest`) is a `TXN_STAGE` request
(`TxnStageRequest`: the transaction, the destination partition, and the
writer's attempt and request number) that names a range instead of carrying
batches.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import TypeVar

import crc32c

from contraflow.spu.protocol.batch import (
    CRC_POS,
    CRC_START,
    HAS_KEYS,
    HEADER,
    HEADER_SIZE,
    KEY_NULLS,
    MAGIC,
    BatchHeader,
    Buffer,
    DecodedBatch,
    check_batch,
)
from contraflow.spu.protocol.compression import Compression
from contraflow.spu.protocol.idempotence import NO_PRODUCER

_CRC = struct.Struct(">I")
T = TypeVar("T")

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


def routed_runs(
    batches: Iterable[DecodedBatch], start: int, end: int
) -> Iterator[DecodedBatch | list[DecodedBatch]]:
    """How a routed copy of the records [start, end) is cut, in offset order: a batch kept whole
    comes alone; the others come in runs holding at least MIN_RECORDS records of the range (the
    last may hold fewer), each to be sliced to the range and joined into one batch. The one walk
    of the SPU's copy and a sink task's."""

    def whole(batch: DecodedBatch) -> bool:
        return kept_whole(batch.header, start, end)

    in_range = (b for b in batches if records_in_range(b, start, end) > 0)
    for run in gathered_runs(in_range, lambda b: records_in_range(b, start, end), MIN_RECORDS, whole):
        yield run[0] if len(run) == 1 and whole(run[0]) else run


def records_in_range(batch: DecodedBatch, start: int, end: int) -> int:
    """How many of `batch`'s records have offsets in [start, end)."""
    return max(0, min(batch.record_count, end - batch.base_offset) - max(0, start - batch.base_offset))


def gathered_runs(
    items: Iterable[T], size: Callable[[T], int], floor: int, alone: Callable[[T], bool]
) -> Iterator[list[T]]:
    """`items` in order, cut into runs to merge: an item `alone` picks is a run of its own (after
    whatever was gathered before it); the others are gathered until their `size`s reach `floor`
    (the last run may hold less). The one cutting rule of routed copies and of Arrow coalescing."""
    run: list[T] = []
    total = 0
    for item in items:
        if alone(item):
            if run:
                yield run
                run, total = [], 0
            yield [item]
            continue
        run.append(item)
        total += size(item)
        if total >= floor:
            yield run
            run, total = [], 0
    if run:
        yield run


def record_count(batch: Buffer) -> int:
    """The number of records of the log batch `batch`, from its header."""
    return int(HEADER.unpack_from(batch, 0)[-1])


@lru_cache(maxsize=8)
def _zero_deltas(count: int) -> bytes:
    """`count` int64 zeros: every record stamped at the batch's first timestamp."""
    return bytes(8 * count)


def restamped(batch: memoryview, now_ms: int) -> list[Buffer]:
    """`batch` as it is staged when routed: every record stamped `now_ms`, no producer field,
    offset and epoch zero (the log assigns them at commit), CRC recomputed. Returned as parts (a
    new header, the zeroed timestamp deltas, the rest of the batch as it is), so the body is
    not copied.

    The batch must be uncompressed (as every batch kept whole is): its timestamp deltas are then
    the body's first section."""
    header = check_batch(batch, crc=False)
    if header.compression is not Compression.NONE:
        raise ValueError("a routed batch must be uncompressed to be restamped")
    count = header.record_count
    head = bytearray(HEADER_SIZE)
    fields = (header.attributes, header.last_offset_delta, now_ms, now_ms, NO_PRODUCER, count)
    HEADER.pack_into(head, 0, 0, header.batch_length, 0, MAGIC, 0, *fields)
    deltas = _zero_deltas(count)
    rest = batch[HEADER_SIZE + len(deltas) :]
    crc = crc32c.crc32c(rest, crc32c.crc32c(deltas, crc32c.crc32c(memoryview(head)[CRC_START:])))
    _CRC.pack_into(head, CRC_POS, crc)
    return [head, deltas, rest]
