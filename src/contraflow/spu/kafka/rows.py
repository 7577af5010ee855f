"""The records inside a Kafka batch body, read and written column-wise.

A Kafka record is a row of varint-prefixed fields::

    length, attributes (1 byte), timestamp delta, offset delta,
    key length, key, value length, value, header count, headers

Doing this row by row in Python costs about a microsecond per record, more than
the rest of a produce or fetch. So both directions work on whole columns:

- reading (`KafkaRows.parse`): finding where each record starts is the one
  sequential step (each start follows from the previous record's length).
  Neighbouring records very often have the same size (fixed-size payloads,
  similar events), so runs of equal lengths are recognised at once (every
  candidate start checked in one numpy step) and only records whose size
  changes are stepped over one by one. Then every other field of every record
  is decoded at once, and Arrow's `take` gathers keys and values into columns.
- writing (`kafka_rows`): every record's varint fields are computed at once
  and Arrow's `binary_join_element_wise` interleaves them with the key and
  value columns in one C++ pass.

Record headers are the exception: they are read and written record by record
(only in batches that have some).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
from contraflow.spu.protocol.batch import DecodedBatch

Body = bytes | memoryview
MIN_RECORD_BYTES = 6  # attributes, timestamp, offset, key length, value length, header count
_NO_HEADERS = pa.scalar(b"\x00")  # a header count of 0
_JOIN = pc.JoinOptions(null_handling="skip")  # a null key adds no bytes (its length says -1)
_FIRST_RUN = 16  # records checked at once when looking for a run of equal sizes
_LONGEST_RUN = 1 << 16
_MAX_QUIET = 4096  # most records stepped one by one before looking for runs again


class RecordFramingError(ValueError):
    """Record framing inside a batch that does not add up."""


# -- reading ----------------------------------------------------------------------------------------


def _unsigned_varint(body: Body, pos: int) -> tuple[int, int]:
    """(value, position after it) of a varint of up to 5 bytes."""
    value = shift = 0
    for _ in range(VARINT_BYTES):
        byte = body[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise RecordFramingError(f"varint at byte {pos - VARINT_BYTES} is longer than 5 bytes")


def _equal_run(buf: UInt8s, pos: int, stride: int, head: UInt8s, limit: int) -> int:
    """How many records from `pos` on, one every `stride` bytes, start with the length varint
    `head` (so each has the previous one's length and the next starts `stride` later)."""
    limit = min(limit, (len(buf) - pos) // stride)
    if limit <= 0:
        return 0
    at = pos + stride * np.arange(limit)
    same = buf[at] == head[0]
    for k in range(1, len(head)):
        same &= buf[at + k] == head[k]
    return limit if same.all() else int(np.argmin(same))


def record_starts(body: Body, count: int) -> tuple[Int64s, Int64s]:
    """(first byte after each record's length varint, each record's length)."""
    if count > len(body) // (1 + MIN_RECORD_BYTES):  # checked before sizing anything by it
        raise RecordFramingError(f"the batch claims {count} records in {len(body)} bytes")
    buf = np.frombuffer(body, dtype=np.uint8)
    starts, lengths = [0] * count, [0] * count
    n = pos = unsigned = 0
    run, quiet = _FIRST_RUN, _FIRST_RUN
    stop = 1  # step records one by one up to this many, then look for a run
    try:
        while n < count:
            for n in range(n, min(stop, count)):  # noqa: B020 (n goes on where it stops)
                first = body[pos]
                if first < 0x80:
                    pos, unsigned = pos + 1, first
                elif body[pos + 1] < 0x80:
                    pos, unsigned = pos + 2, (first & 0x7F) | body[pos + 1] << 7
                else:
                    unsigned, pos = _unsigned_varint(body, pos)
                starts[n] = pos
                lengths[n] = length = (unsigned >> 1) ^ -(unsigned & 1)
                pos += length  # a negative length is refused below, once
            n += 1
            if n == count or length < MIN_RECORD_BYTES:
                break
            # Do the next records repeat the last one's length varint (so its size)?
            size = max(1, (unsigned.bit_length() + 6) // 7)
            stride = size + length
            same = _equal_run(buf, pos, stride, buf[pos - stride : pos - length], min(run, count - n))
            starts[n : n + same] = range(pos + size, pos + size + same * stride, stride)
            lengths[n : n + same] = [length] * same
            n, pos = n + same, pos + same * stride
            if same == run:  # a long run: look further ahead next time
                run, quiet = min(run * 4, _LONGEST_RUN), _FIRST_RUN
            elif same < 2:  # sizes vary here: step one by one for a while, then look again
                run, quiet = _FIRST_RUN, min(quiet * 2, _MAX_QUIET)
            stop = n + (quiet if same < 2 else 1)
    except IndexError:
        raise RecordFramingError(f"the batch ends inside record {n} of {count}") from None
    as_array = partial(np.fromiter, dtype=np.int64, count=count)
    return _checked(as_array(starts), as_array(lengths), pos, len(body))


def _checked(starts: Int64s, lengths: Int64s, end: int, size: int) -> tuple[Int64s, Int64s]:
    short = lengths < MIN_RECORD_BYTES
    if short.any():
        first = int(np.argmax(short))
        raise RecordFramingError(f"record {first} claims {lengths[first]} bytes")
    if end > size:
        raise RecordFramingError(f"the last of {len(starts)} records runs {end - size} bytes past the batch")
    if end < size:
        raise RecordFramingError(f"{size - end} bytes left over after {len(starts)} records")
    return starts, lengths


@dataclass(frozen=True, slots=True)
class KafkaRows:
    """Where each field of each record of an uncompressed Kafka batch body lies."""

    body: Body
    timestamp_deltas: Int64s
    key_starts: Int64s
    key_lengths: Int64s  # -1: null key
    value_starts: Int64s
    value_lengths: Int64s  # -1: null value
    header_starts: Int64s
    header_counts: Int64s
    ends: Int64s

    @classmethod
    def parse(cls, body: Body, count: int) -> KafkaRows:
        """Raises RecordFramingError when the records do not add up to the body."""
        starts, lengths = record_starts(body, count)
        try:
            return cls._fields(body, starts, starts + lengths)
        except VarintError as err:
            raise RecordFramingError(str(err)) from None

    @classmethod
    def _fields(cls, body: Body, starts: Int64s, ends: Int64s) -> KafkaRows:
        buf = np.frombuffer(body, dtype=np.uint8)
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
            raise RecordFramingError("a record has a negative key, value or header count")
        plain = header_counts == 0
        if (header_starts[plain] != ends[plain]).any() or (header_starts > ends).any():
            raise RecordFramingError("a record's fields do not add up to its length")
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

    def headers(self) -> list[list[tuple[str, bytes | None]]]:
        """Each record's headers (record by record: rare and small)."""
        return [
            _read_headers(self.body, int(start), int(count), int(end))
            for start, count, end in zip(self.header_starts, self.header_counts, self.ends, strict=True)
        ]


def _read_headers(body: Body, pos: int, count: int, end: int) -> list[tuple[str, bytes | None]]:
    """One record's `count` headers from `pos`, which must end exactly at `end`."""
    headers: list[tuple[str, bytes | None]] = []
    try:
        for _ in range(count):
            key_length, pos = _signed_varint(body, pos)
            if key_length < 0:
                raise RecordFramingError("a record header has a null key")
            key = str(body[pos : pos + key_length], "utf-8")
            value_length, pos = _signed_varint(body, pos + key_length)
            headers.append((key, None if value_length < 0 else bytes(body[pos : pos + value_length])))
            pos += max(value_length, 0)
    except IndexError:
        raise RecordFramingError("a record's headers run past the batch") from None
    except UnicodeDecodeError:
        raise RecordFramingError("a record header key is not UTF-8") from None
    if pos != end:
        raise RecordFramingError("a record's headers do not add up to its length")
    return headers


def _signed_varint(body: Body, pos: int) -> tuple[int, int]:
    """(value, position after it) of the zigzag varint at `pos`."""
    unsigned, pos = _unsigned_varint(body, pos)
    return (unsigned >> 1) ^ -(unsigned & 1), pos


# -- writing ----------------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    """One signed value as a zigzag varint."""
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned > 0x7F:
        out.append(unsigned & 0x7F | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


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


def _key_lengths(batch: DecodedBatch) -> Int64s:
    """Each record's key length, -1 for a null key."""
    count, buffers = batch.record_count, batch.key_buffers()
    if buffers is None:
        return np.full(count, -1, dtype=np.int64)
    validity, offsets, _ = buffers
    lengths = _lengths(offsets)
    if validity is not None:
        present = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), count=count, bitorder="little")
        lengths[present == 0] = -1
    return lengths


def kafka_rows(batch: DecodedBatch) -> tuple[Any, int]:
    """All records of a log batch in Kafka's row format: (a buffer, the size used of it)."""
    count = batch.record_count
    value_lengths = _lengths(batch.value_buffers()[0])
    key_lengths = _key_lengths(batch)
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
    fields = [length, _no_attributes(count), stamps, offsets, key_length]
    if batch.key_buffers() is None:
        prefix = _binary(*packed_rows([*fields, value_length]))
        rows = pc.binary_join_element_wise(prefix, batch.value_array(), headers, b"", options=_JOIN)
    else:
        prefix = _binary(*packed_rows(fields))
        middle = _binary(*packed_rows([value_length]))
        rows = pc.binary_join_element_wise(
            prefix, batch.key_array(), middle, batch.value_array(), headers, b"", options=_JOIN
        )
    return rows.buffers()[2], int((record_bytes + length.sizes).sum())
