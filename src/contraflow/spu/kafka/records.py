"""Kafka record batches (magic 2) to and from the log's own batches, column-wise.

The two formats share their header fields and codec ids but not their bodies:
Kafka stores records row by row with varints, the log stores Arrow-style
columns. Transcoding works on whole columns, never on one record at a time in
Python (that costs about a microsecond per record, more than the rest of a
produce or fetch):

- log -> Kafka: every record's varint fields are computed at once (numpy), and
  Arrow's `binary_join_element_wise` interleaves them with the key and value
  columns into the records' bytes in one C++ pass.
- Kafka -> log: one short loop finds where each record starts (a record's
  length is a varint in front of it, so the next start depends on the last),
  then every field of every record is decoded at once, and Arrow's `take`
  gathers the keys and values out of the rows into columns.

Record headers are the exception: a batch that has some is handled record by
record for its headers only. Snappy has no codec in the log: a snappy batch is
stored uncompressed and served uncompressed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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
from contraflow.spu.kafka.varints import (
    VARINT_BYTES,
    VARLONG_BYTES,
    Int64s,
    UInt8s,
    VarintColumn,
    VarintError,
    decode_varints,
    packed_rows,
)
from contraflow.spu.protocol.batch import (
    CRC_POS,
    CRC_START,
    DecodedBatch,
    TimestampColumn,
    compute_crc,
    decode_batch,
    encode_columns,
    pack_headers,
    verify_crc,
)
from contraflow.spu.protocol.compression import Compression

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
_NO_HEADERS = pa.scalar(b"\x00")  # a header count of 0
_JOIN = pc.JoinOptions(null_handling="skip")  # a null key adds no bytes (its length says -1)
_MIN_RECORD_BYTES = 6  # attributes, timestamp, offset, key length, value length, header count

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


def _record_starts(body: bytes, count: int) -> tuple[Int64s, Int64s]:
    """(first byte after each record's length varint, each record's length).

    The one sequential step: each record's start follows from the previous length.
    Lengths under 8192 (one or two varint bytes) take the short path."""
    starts, lengths = [0] * count, [0] * count
    pos = 0
    try:
        for i in range(count):
            first = body[pos]
            if first < 0x80:
                pos, unsigned = pos + 1, first
            elif body[pos + 1] < 0x80:
                pos, unsigned = pos + 2, (first & 0x7F) | body[pos + 1] << 7
            else:
                unsigned, pos = _long_varint(body, pos)
            length = (unsigned >> 1) ^ -(unsigned & 1)
            if length < _MIN_RECORD_BYTES:
                raise _corrupt(f"record {i} claims {length} bytes")
            starts[i], lengths[i] = pos, length
            pos += length
    except IndexError:
        raise _corrupt(f"the batch ends inside record {i} of {count}") from None
    if pos > len(body):
        raise _corrupt(f"the last of {count} records runs {pos - len(body)} bytes past the batch")
    if pos < len(body):
        raise _corrupt(f"{len(body) - pos} bytes left over after {count} records")
    return np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64)


def _long_varint(body: bytes, pos: int) -> tuple[int, int]:
    """(unsigned value, position after it) of a varint of any length up to 5 bytes."""
    value = shift = 0
    for _ in range(VARINT_BYTES):
        byte = body[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise _corrupt(f"varint at byte {pos - VARINT_BYTES} is longer than 5 bytes")


@dataclass(frozen=True, slots=True)
class KafkaRows:
    """Where each field of each record of an uncompressed Kafka batch body lies."""

    body: bytes
    timestamp_deltas: Int64s
    key_starts: Int64s
    key_lengths: Int64s  # -1: null key
    value_starts: Int64s
    value_lengths: Int64s  # -1: null value
    header_starts: Int64s
    header_counts: Int64s
    ends: Int64s

    @classmethod
    def parse(cls, body: bytes, count: int) -> KafkaRows:
        starts, lengths = _record_starts(body, count)
        buf = np.frombuffer(body, dtype=np.uint8)
        try:
            return cls._fields(body, buf, starts, starts + lengths)
        except VarintError as err:
            raise _corrupt(str(err)) from None

    @classmethod
    def _fields(cls, body: bytes, buf: UInt8s, starts: Int64s, ends: Int64s) -> KafkaRows:
        pos = starts + 1  # after the attributes byte, unused in magic 2
        timestamp_deltas, size = decode_varints(buf, pos, VARLONG_BYTES)
        _, offset_size = decode_varints(buf, pos + size, VARINT_BYTES)  # offsets are the log's
        pos = pos + size + offset_size
        key_lengths, size = decode_varints(buf, pos, VARINT_BYTES)
        key_starts = pos + size
        pos = key_starts + np.maximum(key_lengths, 0)
        value_lengths, size = decode_varints(buf, pos, VARINT_BYTES)
        value_starts = pos + size
        pos = value_starts + np.maximum(value_lengths, 0)
        header_counts, size = decode_varints(buf, pos, VARINT_BYTES)
        header_starts = pos + size
        if (key_lengths < -1).any() or (value_lengths < -1).any() or (header_counts < 0).any():
            raise _corrupt("a record has a negative key, value or header count")
        plain = header_counts == 0
        if (header_starts[plain] != ends[plain]).any() or (header_starts > ends).any():
            raise _corrupt("a record's fields do not add up to its length")
        return cls(
            body,
            timestamp_deltas,
            key_starts,
            key_lengths,
            value_starts,
            value_lengths,
            header_starts,
            header_counts,
            ends,
        )

    def column(self, starts: Int64s, lengths: Int64s) -> tuple[pa.Buffer, pa.Buffer]:
        """(int32 offsets, data) of the fields at `starts` (nulls empty), gathered by Arrow:
        the body seen as alternating field and gap slices, from which the fields are taken."""
        count = len(starts)
        bounds = np.empty(2 * count, dtype=np.int32)
        bounds[0::2] = starts
        bounds[1::2] = starts + np.maximum(lengths, 0)
        sliced = pa.Array.from_buffers(
            pa.binary(), 2 * count - 1, [None, pa.py_buffer(bounds), pa.py_buffer(self.body)]
        )
        gathered = sliced.take(pa.array(np.arange(0, 2 * count, 2)))
        _, offsets, data = gathered.buffers()
        return offsets, data

    def headers(self) -> list[bytes]:
        """Each record's headers packed as the log stores them (record by record: rare and small)."""
        return [
            # Kafka allows a null header value; msgpack keeps it as nil.
            pack_headers(_read_headers(self.body, int(start), int(count), int(end)))  # type: ignore[arg-type]
            for start, count, end in zip(self.header_starts, self.header_counts, self.ends, strict=True)
        ]


def _read_headers(body: bytes, pos: int, count: int, end: int) -> list[tuple[str, bytes | None]]:
    """One record's `count` headers from `pos`, which must end exactly at `end`."""
    headers: list[tuple[str, bytes | None]] = []
    try:
        for _ in range(count):
            key_length, pos = _read_varint(body, pos)
            if key_length < 0:
                raise _corrupt("a record header has a null key")
            key = body[pos : pos + key_length].decode()
            value_length, pos = _read_varint(body, pos + key_length)
            headers.append((key, None if value_length < 0 else body[pos : pos + value_length]))
            pos += max(value_length, 0)
    except IndexError:
        raise _corrupt("a record's headers run past the batch") from None
    except UnicodeDecodeError:
        raise _corrupt("a record header key is not UTF-8") from None
    if pos != end:
        raise _corrupt("a record's headers do not add up to its length")
    return headers


def _read_varint(body: bytes, pos: int) -> tuple[int, int]:
    """(signed value, position after it) of the zigzag varint at `pos`."""
    unsigned, pos = _long_varint(body, pos)
    return (unsigned >> 1) ^ -(unsigned & 1), pos


def _varint(value: int) -> bytes:
    """One signed value as a zigzag varint."""
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned > 0x7F:
        out.append(unsigned & 0x7F | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


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
        plain = bytes(body) if codec == 0 else _DECOMPRESS[codec](body)
    except Exception as err:  # an unknown codec id or a damaged compressed body
        raise _corrupt(f"cannot decompress record batch (codec {codec}): {err}") from None
    rows = KafkaRows.parse(plain, count)
    headers = None
    if rows.header_counts.any():
        packed = rows.headers()
        headers = (_offsets_of(packed), b"".join(packed))
    log_batch = encode_columns(
        count,
        rows.column(rows.value_starts, rows.value_lengths),
        keys=_key_column(rows),
        headers=headers,
        compression=Compression.NONE if codec == _SNAPPY else Compression(codec),
        producer_id=producer_id,
        timestamps=_timestamps(base_ts, max_ts, rows.timestamp_deltas, attributes),
    )
    exact = bool((rows.value_lengths >= 0).all())
    return ProducedBatch(log_batch, count, producer_id, epoch, sequence, raw if exact else None)


def _offsets_of(items: list[bytes]) -> bytes:
    return np.cumsum([0, *map(len, items)], dtype=np.int64).astype("<i4").tobytes()


# -- log -> Kafka -----------------------------------------------------------------------------------


def _binary(sizes: Int64s, data: UInt8s | bytes) -> pa.Array:
    offsets = np.zeros(len(sizes) + 1, dtype="<i4")
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(sizes), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _lengths(offsets: memoryview) -> Int64s:
    return np.diff(np.frombuffer(offsets, dtype="<i4")).astype(np.int64)


def _kafka_headers(batch: DecodedBatch) -> list[bytes]:
    """Each record's headers as Kafka's count and key/value fields (record by record)."""
    rows = []
    for pairs in batch.headers():
        row = bytearray(_varint(len(pairs)))
        for key, value in pairs:
            name = key.encode()
            row += _varint(len(name)) + name
            row += _varint(-1) if value is None else _varint(len(value)) + value
        rows.append(bytes(row))
    return rows


@lru_cache(maxsize=16)
def _offset_deltas(count: int) -> VarintColumn:
    """0..count-1: the same for every log batch of this size."""
    return VarintColumn(np.arange(count))


@lru_cache(maxsize=16)
def _no_attributes(count: int) -> VarintColumn:
    return VarintColumn(np.zeros(count, dtype=np.int64))


def _kafka_rows(batch: DecodedBatch) -> tuple[Any, int]:
    """All records of a log batch in Kafka's row format: (buffer, its size)."""
    count = batch.record_count
    value_offsets, _ = batch.value_buffers()
    value_lengths = _lengths(value_offsets)
    key_buffers = batch.key_buffers()
    key_lengths = np.full(count, -1, dtype=np.int64)
    keys = None
    if key_buffers is not None:
        validity, key_offsets, _ = key_buffers
        keys = batch.key_array()
        key_lengths = _lengths(key_offsets)
        if validity is not None:
            present = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), count=count, bitorder="little")
            key_lengths[present == 0] = -1
    headers: Any = _NO_HEADERS
    header_bytes = np.ones(count, dtype=np.int64)
    if batch.header_buffers() is not None:
        packed = _kafka_headers(batch)
        headers = pa.array(packed, pa.binary())
        header_bytes = np.fromiter(map(len, packed), dtype=np.int64, count=count)
    stamps = VarintColumn(np.frombuffer(batch.timestamp_delta_buffer(), dtype="<i8"))
    offsets = _offset_deltas(count)
    key_length = VarintColumn(key_lengths)
    value_length = VarintColumn(value_lengths)
    record_bytes = (
        1
        + stamps.sizes
        + offsets.sizes
        + key_length.sizes
        + np.maximum(key_lengths, 0)
        + value_length.sizes
        + value_lengths
        + header_bytes
    )
    length = VarintColumn(record_bytes)
    attributes = _no_attributes(count)
    if keys is None:
        prefix = _binary(*packed_rows([length, attributes, stamps, offsets, key_length, value_length]))
        rows = pc.binary_join_element_wise(prefix, batch.value_array(), headers, b"", options=_JOIN)
    else:
        prefix = _binary(*packed_rows([length, attributes, stamps, offsets, key_length]))
        middle = _binary(*packed_rows([value_length]))
        rows = pc.binary_join_element_wise(
            prefix, keys, middle, batch.value_array(), headers, b"", options=_JOIN
        )
    size = int((record_bytes + length.sizes).sum())
    return rows.buffers()[2], size


def to_kafka(raw: memoryview) -> bytearray:
    """A log batch as a Kafka batch with the same offsets, timestamps and codec."""
    batch = decode_batch(raw)
    header = batch.header
    rows, size = _kafka_rows(batch)
    codec = int(header.compression)
    payload = memoryview(rows)[:size] if codec == 0 else _COMPRESS[codec](bytes(memoryview(rows)[:size]))
    out = bytearray().join([bytes(KAFKA_HEADER_SIZE), payload])
    _KAFKA_HEADER.pack_into(
        out,
        0,
        header.base_offset,
        len(out) - 12,
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
    _CRC.pack_into(out, CRC_POS, compute_crc(out))
    return out


assert CRC_START == 21  # Kafka's CRC covers the same range as the log's
