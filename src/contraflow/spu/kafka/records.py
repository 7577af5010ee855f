"""Kafka record batches (magic 2) to and from the log's own batches.

The two formats share their header fields and codec ids but not their bodies:
Kafka stores records row by row with varints, the log stores Arrow-style
columns. So batches are transcoded, record data passing through as buffer
slices. The per-record varint work is done by aiokafka's compiled record
codec (and its codecs, which cover snappy, gzip, lz4 and zstd through cramjam).

Snappy has no codec in the log: a snappy batch is stored uncompressed and
served uncompressed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from contraflow.spu.kafka.errors import KafkaError, KafkaErrorCode
from contraflow.spu.protocol.batch import decode_batch, encode_batch, verify_crc
from contraflow.spu.protocol.compression import Compression

KAFKA_MAGIC = 2
_HEADER = struct.Struct(">qiib")  # base_offset, batch_length, partition_leader_epoch, magic
KAFKA_HEADER_SIZE = 61
_BASE_OFFSET = struct.Struct(">q")
_NO_LIMIT = 1 << 31
_SNAPPY = 2
TRANSACTIONAL = 0x10
CONTROL = 0x20


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
        _, length, _, magic = _HEADER.unpack_from(records, pos)
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


def from_kafka(raw: memoryview) -> ProducedBatch:
    """A client's batch as a log batch: CRC checked, records copied column-wise."""
    # Kafka's CRC field and range are the log's (offset 17, bytes 21..end): the log's
    # hardware CRC32C checks it, many times faster than aiokafka's table-driven one.
    if not verify_crc(raw):
        raise KafkaError(KafkaErrorCode.CORRUPT_MESSAGE, "record batch CRC32C mismatch")
    batch = DefaultRecordBatch(raw)
    if batch.attributes & (TRANSACTIONAL | CONTROL):
        raise KafkaError(KafkaErrorCode.INVALID_REQUEST, "transactional record batches are not supported")
    codec = batch.compression_type
    try:
        records = list(batch)
    except Exception as err:  # damaged compressed body or record framing
        raise KafkaError(KafkaErrorCode.CORRUPT_MESSAGE, f"cannot read record batch: {err}") from None
    if not records:
        raise KafkaError(KafkaErrorCode.CORRUPT_MESSAGE, "empty record batch")
    keys = [r.key for r in records]
    headers = [r.headers for r in records]
    values = [r.value for r in records]
    exact = None not in values
    log_batch = encode_batch(
        values if exact else [v or b"" for v in values],
        keys if any(k is not None for k in keys) else None,
        headers if any(headers) else None,
        [r.timestamp for r in records],
        Compression.NONE if codec == _SNAPPY else Compression(codec),
        producer_id=batch.producer_id,
    )
    return ProducedBatch(
        log_batch,
        len(records),
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        raw if exact else None,
    )


def to_kafka(raw: memoryview) -> bytearray:
    """A log batch as a Kafka batch with the same offsets, timestamps and codec."""
    batch = decode_batch(raw)
    builder = DefaultRecordBatchBuilder(KAFKA_MAGIC, int(batch.header.compression), 0, -1, -1, -1, _NO_LIMIT)
    append = builder.append
    rows = zip(batch.timestamps(), batch.keys(), batch.values(), batch.headers(), strict=True)
    for delta, (timestamp, key, value, headers) in enumerate(rows):
        append(delta, timestamp, key, value, headers)
    out = builder.build()
    _BASE_OFFSET.pack_into(out, 0, batch.base_offset)  # outside the CRC, like the log's own stamp
    return out
