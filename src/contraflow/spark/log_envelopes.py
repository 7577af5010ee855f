"""Log batches as envelopes: one Spark row per log batch, for pipelines that only route.

A pipeline that only routes events (`analysis.routing_only`) needs none of
their contents, so its query moves whole log batches: the source yields one
row per batch (`batch`: the batch's bytes as the SPU stores them, `records`:
how many events it holds), Spark carries a few rows per micro-batch instead of
one per event, and the sink stages each batch on its output topic after
rewriting only its header. Nothing decodes a value or builds a Python object
per event on the way.

What the sink writes is what the per-row path writes: each record's value and
headers as they were, no key, stamped with the time it is written (ms), no
producer field. A batch that can go as it is (every record in the read range,
no keys, uncompressed, not small) is forwarded byte for byte; the others (a
range cut through a batch, keys, compression, runs of small batches) are
re-encoded from their columns, several small ones into one envelope, so a
trickle of one-record batches does not become as many rows, stage requests and
output batches.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from contraflow.spark.arrow_log import batch_payload, encode_rows
from contraflow.spu.protocol.batch import (
    Buffer,
    DecodedBatch,
    decode_batch,
)
from contraflow.spu.protocol.range_stage import kept_whole, record_count, routed_runs

_CRC = struct.Struct(">I")
ENVELOPE_COLUMN = "batch"
ENVELOPE_SCHEMA = pa.schema([(ENVELOPE_COLUMN, pa.binary()), ("records", pa.int32())])
ENVELOPE_DDL = "batch binary, records int"
# A merged envelope holds at most this many records.
MAX_MERGED_RECORDS = 65_536


def forwardable(batch: DecodedBatch, start: int, end: int) -> bool:
    """Whether `batch` can be the envelope of its records in [start, end) byte for byte."""
    return kept_whole(batch.header, start, end)


def envelopes(batches: Iterable[DecodedBatch], start: int, end: int) -> Iterator[Buffer]:
    """One log batch per envelope for the records of `batches` in [start, end), in offset order."""
    for run in routed_runs(batches, start, end):
        if isinstance(run, DecodedBatch):
            yield run.buffer
        else:
            yield from _merged([rows for b in run if (rows := batch_payload(b, start, end)) is not None])


def _merged(rows: list[pa.RecordBatch]) -> Iterator[bytearray]:
    """`rows` re-encoded as log batches of at most MAX_MERGED_RECORDS records each."""
    table = pa.Table.from_batches(rows)
    for start in range(0, table.num_rows, MAX_MERGED_RECORDS):
        yield encode_rows(table.slice(start, MAX_MERGED_RECORDS))


def envelope_rows(batches: Iterable[Buffer]) -> pa.RecordBatch | None:
    """Envelopes as ENVELOPE_SCHEMA rows (their bytes joined into one Arrow buffer), None if none."""
    batches = list(batches)
    if not batches:
        return None
    sizes = np.fromiter((len(b) for b in batches), dtype=np.int64, count=len(batches))
    offsets = np.zeros(len(batches) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    data = bytearray().join(batches)
    column = pa.Array.from_buffers(
        pa.binary(), len(batches), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    records = pa.array([record_count(b) for b in batches], pa.int32())
    return pa.RecordBatch.from_arrays([column, records], schema=ENVELOPE_SCHEMA)


def envelope_views(column: pa.Array) -> list[memoryview]:
    """The envelopes of a `batch` column, each a view of the column's memory."""
    if pa.types.is_large_binary(column.type):
        column = column.cast(pa.binary())
    offsets = np.frombuffer(column.buffers()[1], dtype="<i4", count=len(column) + 1, offset=4 * column.offset)
    data = memoryview(column.buffers()[2] or b"")
    return [data[lo:hi] for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]


def recompressed(batch: memoryview, compression: str) -> bytearray:
    """`batch` re-encoded with `compression` (a sink option): its values and headers, stamped now."""
    decoded = decode_batch(batch)
    rows = batch_payload(decoded, decoded.base_offset, decoded.header.next_offset)
    assert rows is not None
    return encode_rows(rows, compression)
