"""Log record batches to Arrow record batches and back, buffer to buffer.

The log's batch body is laid out like Arrow buffers (see spu/protocol/batch.py),
so reading wraps a batch's value column in a pyarrow array without copying it,
and writing builds a batch body from an Arrow binary column's offsets and data.
No per-record Python objects on either path: that is what keeps the bridge
close to plain PySpark's speed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contraflow.spu.protocol.batch import NO_HEADERS, DecodedBatch, encode_columns, pack_headers
from contraflow.spu.protocol.compression import Compression
from contraflow.spu.protocol.range_stage import gathered_runs, records_in_range

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

SOURCE_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADER_TYPE),
    ]
)
SOURCE_DDL = (
    "topic string, partition int, offset bigint, timestamp timestamp, key binary, value binary, "
    "headers array<struct<key: string, value: binary>>"
)


PAYLOAD_SCHEMA = pa.schema([("value", pa.binary()), ("headers", pa.binary())])
PAYLOAD_DDL = "value binary, headers binary"
"""What the source yields with `columns = payload`: the value and the headers as stored (packed),
both wrapping the log batch's own memory. Pipelines that only route events need nothing else, and
every column less is one the JVM does not convert row by row."""


def _stored_headers(batch: DecodedBatch) -> pa.Array:
    """Each record's headers as stored (msgpack), sharing the batch's memory; `NO_HEADERS` for
    every record of a batch without a headers column."""
    buffers = batch.header_buffers()
    if buffers is None:
        return pa.repeat(pa.scalar(NO_HEADERS, pa.binary()), batch.record_count)
    offsets_buf, data = buffers
    return pa.Array.from_buffers(
        pa.binary(), batch.record_count, [None, pa.py_buffer(offsets_buf), pa.py_buffer(data)]
    )


def _unpacked_headers(packed: pa.Array) -> pa.Array:
    """Packed headers as list<struct<key, value>>, unpacking each distinct packed value once.

    A pull's records mostly share their headers (none, or its metadata; the
    resume marker on its last record), so the packed values are
    dictionary-encoded in C, the few distinct ones unpacked in Python, and the
    column rebuilt with `take`.
    """
    encoded = pc.dictionary_encode(packed)
    distinct = [
        [{"key": k, "value": v} for k, v in msgpack.unpackb(value)]
        for value in encoded.dictionary.to_pylist()
    ]
    return pa.array(distinct, HEADER_TYPE).take(encoded.indices)


def repeated_text(text: str, count: int) -> pa.Array:
    """`text` `count` times as a string column, built from one copy of the text (no Python list)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(count, dtype=np.int32)), pa.array([text])).cast(
        pa.string()
    )


def batches_to_arrow(
    topic: str, partition: int, pieces: Sequence[tuple[DecodedBatch, int, int]]
) -> pa.RecordBatch | None:
    """The records of several log batches of one partition, each with offsets in its [start, end),
    as one batch of SOURCE_SCHEMA rows (None when no record is in range).

    Each column is concatenated once and the headers are unpacked once for all
    the log batches: converting a few thousand records at a time and merging the
    results paid the fixed costs of every column per log batch (w1's read task:
    the runtime appends about 5,800 events a batch, merged to 65,536).
    """
    cores, packed = [], []
    for batch, start, end in pieces:
        lo, hi = max(0, start - batch.base_offset), min(batch.record_count, end - batch.base_offset)
        if lo < hi:
            cores.append(batch.to_arrow().slice(lo, hi - lo))
            packed.append(_stored_headers(batch).slice(lo, hi - lo))
    if not cores:
        return None
    core = cores[0] if len(cores) == 1 else _concatenated(cores)
    count = core.num_rows
    columns = [
        repeated_text(topic, count),
        pa.array(np.full(count, partition, dtype=np.int32)),
        core.column("offset"),
        core.column("timestamp").cast(pa.timestamp("us", tz="UTC")),
        core.column("key"),
        core.column("value"),
        _unpacked_headers(packed[0] if len(packed) == 1 else pa.concat_arrays(packed)),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SOURCE_SCHEMA)


def _concatenated(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def batch_payload(batch: DecodedBatch, start: int, end: int) -> pa.RecordBatch | None:
    """The records of `batch` with offsets in [start, end) as PAYLOAD_SCHEMA rows, without copying."""
    lo, hi = max(0, start - batch.base_offset), min(batch.record_count, end - batch.base_offset)
    if lo >= hi:
        return None
    count = batch.record_count
    buffers = batch.header_buffers()
    headers = (
        pa.nulls(count, pa.binary())
        if buffers is None
        else pa.Array.from_buffers(pa.binary(), count, [None, *map(pa.py_buffer, buffers)])
    )
    return pa.RecordBatch.from_arrays([batch.value_array(), headers], schema=PAYLOAD_SCHEMA).slice(
        lo, hi - lo
    )


def coalesce(
    batches: Iterable[pa.RecordBatch], max_rows: int, min_rows: int | None = None
) -> Iterator[pa.RecordBatch]:
    """Merge small record batches into ones of up to `max_rows` (fewer JVM round trips).

    A batch of at least `min_rows` (default `max_rows`) passes through as it
    is, after whatever was pending: copying it would cost the CPU that merging saves.
    """
    floor = max_rows if min_rows is None else min_rows

    def rows(batch: pa.RecordBatch) -> int:
        return batch.num_rows

    for group in gathered_runs(batches, rows, floor, lambda batch: batch.num_rows >= floor):
        if len(group) == 1:
            yield group[0]
        else:
            yield from pa.Table.from_batches(group).combine_chunks().to_batches(max_rows)


def coalesced_rows(
    topic: str,
    partition: int,
    pieces: Iterable[tuple[DecodedBatch, int, int]],
    max_rows: int,
    min_rows: int,
) -> Iterator[pa.RecordBatch]:
    """`coalesce` of the `batch_to_arrow` rows of each (log batch, start, end), merged while still
    log batches, so each merged Arrow batch is built once (`batches_to_arrow`)."""

    def in_range(piece: tuple[DecodedBatch, int, int]) -> int:
        return records_in_range(*piece)

    def large(piece: tuple[DecodedBatch, int, int]) -> bool:
        return in_range(piece) >= min_rows

    for group in gathered_runs((piece for piece in pieces if in_range(piece)), in_range, min_rows, large):
        rows = batches_to_arrow(topic, partition, group)
        assert rows is not None  # every piece has records in range
        if len(group) == 1:
            yield rows
        else:
            yield from (rows.slice(at, max_rows) for at in range(0, rows.num_rows, max_rows))


@dataclass(frozen=True)
class Route:
    """Where a group of rows goes."""

    topic: str
    partition: int


def _binary(column: pa.Array) -> pa.Array:
    """A column as a 32-bit-offset binary array starting at offset 0 (strings are reinterpreted)."""
    if pa.types.is_string(column.type):
        column = column.view(pa.binary())
    elif pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type):
        column = column.cast(pa.binary())
    elif not pa.types.is_binary(column.type):
        raise TypeError(f"expected a binary or string column, not {column.type}")
    return pa.concat_arrays([column]) if column.offset else column


def _buffers(column: pa.Array) -> tuple[bytes, memoryview]:
    """(offsets rebased to start at 0, the data they cover) of a binary array."""
    count = len(column)
    raw = np.frombuffer(column.buffers()[1], dtype="<i4", count=count + 1)
    first, last = int(raw[0]), int(raw[-1])
    data = column.buffers()[2]
    view = memoryview(data)[first:last] if data is not None else memoryview(b"")
    return (raw - first if first else raw).astype("<i4", copy=False).tobytes(), view


def _key_buffers(column: pa.Array) -> tuple[memoryview | None, bytes, memoryview] | None:
    keys = _binary(column)
    if keys.null_count == len(keys):
        return None
    validity = memoryview(keys.buffers()[0])[: (len(keys) + 7) // 8] if keys.null_count else None
    offsets, data = _buffers(keys)
    return validity, offsets, data


def _packed_headers(column: pa.Array) -> pa.Array | None:
    """Headers as one packed binary value per row: contraflow's own (already packed,
    binary) or Kafka's list<struct<key, value>> packed here.

    Only rows that have headers are packed one by one; the rest (usually
    nearly all) get the packed empty list in one vectorised step."""
    if column.null_count == len(column):
        return None
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return pc.fill_null(column, NO_HEADERS)
    lengths = pc.fill_null(pc.list_value_length(column), 0)
    present = np.flatnonzero(lengths.to_numpy(zero_copy_only=False))
    if len(present) == 0:
        return None
    packed = np.full(len(column), NO_HEADERS, dtype=object)
    rows = column.take(pa.array(present)).to_pylist()
    packed[present] = [pack_headers([(h["key"], h["value"]) for h in row]) for row in rows]
    return pa.array(packed, pa.binary())


def encode_rows(rows: pa.Table | pa.RecordBatch, compression: Compression | str | None = None) -> bytearray:
    """A log batch holding the rows' `value` (and `key`, `headers` if present), built from Arrow buffers."""
    names = rows.schema.names
    values = _binary(_column(rows, "value"))
    if values.null_count:
        values = pc.fill_null(values, b"")
    keys = _key_buffers(_column(rows, "key")) if "key" in names else None
    headers = _packed_headers(_column(rows, "headers")) if "headers" in names else None
    return encode_columns(
        len(values),
        _buffers(values),
        keys=keys,
        headers=None if headers is None else _buffers(_binary(headers)),
        compression=compression,
    )


def _column(rows: pa.Table | pa.RecordBatch, name: str) -> pa.Array:
    column = rows.column(name)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


PAYLOAD_COLUMNS = ("value", "key", "headers")


def route_rows(
    batch: pa.RecordBatch,
    default_topic: str | None,
    partitions_of: dict[str, int],
    spread: int,
    *,
    columns: tuple[str, ...] = PAYLOAD_COLUMNS,
) -> Iterator[tuple[Route, pa.Table]]:
    """Split a batch's rows by destination topic and partition.

    `topic` and `partition` columns pick the destination row by row; without
    them rows go to `default_topic`, and to partition `spread` modulo the
    topic's partition count (the writing task's id, so tasks spread the load
    while each task's rows keep their order in one partition). The routed
    tables hold the rows' `columns` (those present).
    """
    names = batch.schema.names
    payload = pa.Table.from_batches([batch.select([n for n in columns if n in names])])
    if "topic" not in names and "partition" not in names:
        if default_topic is None:
            raise ValueError("rows have no 'topic' column and the sink has no 'topic' option")
        yield Route(default_topic, spread % partitions_of[default_topic]), payload
        return
    count = batch.num_rows
    topics = batch.column(names.index("topic")) if "topic" in names else pa.nulls(count, pa.string())
    parts = (
        batch.column(names.index("partition")).cast(pa.int32())
        if "partition" in names
        else pa.nulls(count, pa.int32())
    )
    keyed = pa.table({"t": topics, "p": parts})
    for key in keyed.group_by(["t", "p"], use_threads=False).aggregate([]).to_pylist():
        topic = key["t"] if key["t"] is not None else default_topic
        if topic is None:
            raise ValueError("a row has a null 'topic' and the sink has no 'topic' option")
        mask = pc.and_(_matches(keyed["t"], key["t"]), _matches(keyed["p"], key["p"]))
        partition = key["p"] if key["p"] is not None else spread % partitions_of[topic]
        yield Route(topic, partition), payload.filter(mask)


def _matches(column: pa.ChunkedArray, value: object) -> pa.ChunkedArray:
    return pc.is_null(column) if value is None else pc.equal(column, value)
