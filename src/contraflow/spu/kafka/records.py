"""Kafka record batches (magic 2) to and from the log's own batches.

The two formats share their header fields and codec ids but not their bodies:
Kafka stores records row by row with varints, the log stores Arrow-style
columns. This module handles the batch around the records (header, CRC,
codec); `rows` turns the records themselves into columns and back, whole
columns at a time.

Snappy has no codec in the log: a snappy batch is stored uncompressed and
served uncompressed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa
from aiokafka.codec import (
    gzip_decode,
    gzip_encode,
    lz4_decode,
    lz4_encode,
    snappy_decode,
    zstd_decode,
    zstd_encode,
)

from contraflow.spu.kafka.errors import KafkaError, KafkaErrorCode
from contraflow.spu.kafka.rows import KafkaRows, RecordFramingError, kafka_rows
from contraflow.spu.kafka.varints import Int64s
from contraflow.spu.protocol.batch import (
    CRC_POS,
    CRC_START,
    TimestampColumn,
    WireBuffer,
    decode_batch,
    encode_columns,
    pack_headers,
    verify_crc,
)
from contraflow.spu.protocol.compression import Compression
from contraflow.spu.protocol.idempotence import log_producer_field

KAFKA_MAGIC = 2
# base_offset, batch_length, partition_leader_epoch, magic, crc, attributes, last_offset_delta,
# base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, record_count
_KAFKA_HEADER = struct.Struct(">qiibIhiqqqhii")
KAFKA_HEADER_SIZE = _KAFKA_HEADER.size  # 61
_FRAMING = struct.Struct(">qiib")  # base_offset, batch_length, partition_leader_epoch, magic
_CRC = struct.Struct(">I")
_SNAPPY = 2
_CODEC_MASK = 0x07
LOG_APPEND_TIME = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
_NO_LEADER_EPOCH = -1
_NO_PRODUCER = (-1, -1, -1)  # producer id, epoch, base sequence: what a fetch reports

_DECOMPRESS: dict[int, Callable[[Any], bytes]] = {
    1: gzip_decode,
    _SNAPPY: lambda data: snappy_decode(bytes(data)),
    3: lz4_decode,
    4: zstd_decode,
}
_COMPRESS: dict[int, Callable[[Any], bytes]] = {1: gzip_encode, 3: lz4_encode, 4: zstd_encode}


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    """One batch of a produce request, ready for the log, with what idempotence checks need."""

    log_batch: bytearray
    record_count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    # The client's own bytes when serving them as they are is exact (no null values, which
    # the log stores as empty): a fetch of the same records can then skip transcoding.
    as_sent: memoryview | None = None


def split_kafka_batches(records: memoryview) -> list[memoryview]:
    """Cut a produce request's records field into whole batches (zero-copy)."""
    batches: list[memoryview] = []
    pos = 0
    while pos < len(records):
        if len(records) - pos < KAFKA_HEADER_SIZE:
            raise KafkaError(KafkaErrorCode.CORRUPT_MESSAGE, f"truncated record batch at byte {pos}")
        _, length, _, magic = _FRAMING.unpack_from(records, pos)
        if magic != KAFKA_MAGIC:
            raise KafkaError(
                KafkaErrorCode.UNSUPPORTED_VERSION, f"record batch magic {magic}: only magic 2 is accepted"
            )
        end = pos + 12 + length
        if length < KAFKA_HEADER_SIZE - 12 or end > len(records):
            raise KafkaError(
                KafkaErrorCode.CORRUPT_MESSAGE, f"record batch at byte {pos} claims {length} bytes"
            )
        batches.append(records[pos:end])
        pos = end
    if not batches:
        raise KafkaError(KafkaErrorCode.CORRUPT_MESSAGE, "the produce request carries no record batch")
    return batches


# -- Kafka -> log -----------------------------------------------------------------------------------


def _corrupt(message: str) -> KafkaError:
    return KafkaError(KafkaErrorCode.CORRUPT_MESSAGE, message)


def _timestamps(header_base: int, header_max: int, deltas: Int64s, attributes: int) -> TimestampColumn:
    if attributes & LOG_APPEND_TIME:  # the broker's time stands for every record
        return TimestampColumn(header_max, header_max, bytes(8 * len(deltas)))
    return TimestampColumn(header_base, header_base + int(deltas.max()), deltas.astype("<i8").tobytes())


def _key_column(rows: KafkaRows) -> tuple[bytes | None, pa.Buffer, pa.Buffer] | None:
    present = rows.key_lengths >= 0
    if not present.any():
        return None
    validity = None if present.all() else np.packbits(present, bitorder="little").tobytes()
    return (validity, *rows.column(rows.key_starts, rows.key_lengths))


def from_kafka(raw: memoryview) -> ProducedBatch:
    """A client's batch as a log batch: CRC checked, records gathered column-wise."""
    # Kafka's CRC field and range are the log's (offset 17, bytes 21..end): the log's
    # hardware CRC32C checks it.
    if not verify_crc(raw):
        raise _corrupt("record batch CRC32C mismatch")
    fields = _KAFKA_HEADER.unpack_from(raw, 0)
    attributes, base_ts, max_ts, producer_id, epoch, sequence, count = fields[5], *fields[7:]
    if attributes & (TRANSACTIONAL | CONTROL):
        raise KafkaError(KafkaErrorCode.INVALID_REQUEST, "transactional record batches are not supported")
    if count <= 0:
        raise _corrupt("empty record batch")
    codec = attributes & _CODEC_MASK
    body = raw[KAFKA_HEADER_SIZE:]
    try:
        plain = body if codec == 0 else _DECOMPRESS[codec](body)
    except Exception as err:  # an unknown codec id or a damaged compressed body
        raise _corrupt(f"cannot decompress record batch (codec {codec}): {err}") from None
    try:
        rows = KafkaRows.parse(plain, count)
        headers = _header_column(rows) if rows.header_counts.any() else None
    except RecordFramingError as err:
        raise _corrupt(str(err)) from None
    log_batch = encode_columns(
        count,
        rows.column(rows.value_starts, rows.value_lengths),
        keys=_key_column(rows),
        headers=headers,
        compression=Compression.NONE if codec == _SNAPPY else Compression(codec),
        producer_id=log_producer_field(producer_id, sequence),
        timestamps=_timestamps(base_ts, max_ts, rows.timestamp_deltas, attributes),
    )
    exact = bool((rows.value_lengths >= 0).all())
    return ProducedBatch(log_batch, count, producer_id, epoch, sequence, raw if exact else None)


def _header_column(rows: KafkaRows) -> tuple[bytes, bytes]:
    """Each record's headers packed as the log stores them, as (int32 offsets, data)."""
    # Kafka allows a null header value; msgpack keeps it as nil.
    packed = [pack_headers(headers) for headers in rows.headers()]  # type: ignore[arg-type]
    offsets = np.cumsum([0, *map(len, packed)], dtype=np.int64).astype("<i4")
    return offsets.tobytes(), b"".join(packed)


# -- log -> Kafka -----------------------------------------------------------------------------------


def to_kafka(raw: memoryview) -> list[WireBuffer]:
    """A log batch as a Kafka batch with the same offsets, timestamps and codec: its header
    and its records as two buffers (written back to back; joining them would copy)."""
    batch = decode_batch(raw)
    header = batch.header
    rows, size = kafka_rows(batch)
    codec = int(header.compression)
    payload = memoryview(rows)[:size] if codec == 0 else _COMPRESS[codec](bytes(memoryview(rows)[:size]))
    head = bytearray(KAFKA_HEADER_SIZE)
    _KAFKA_HEADER.pack_into(
        head,
        0,
        header.base_offset,
        KAFKA_HEADER_SIZE + len(payload) - 12,
        _NO_LEADER_EPOCH,
        KAFKA_MAGIC,
        0,
        codec,
        header.last_offset_delta,
        header.first_timestamp,
        header.max_timestamp,
        *_NO_PRODUCER,
        header.record_count,
    )
    crc = crc32c.crc32c(payload, crc32c.crc32c(memoryview(head)[CRC_START:]))
    _CRC.pack_into(head, CRC_POS, crc)
    return [head, payload]


assert CRC_START == 21  # Kafka's CRC covers the same range as the log's (verify_crc checks it)
