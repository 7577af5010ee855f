"""Record batches: the unit that is produced, stored, replicated and fetched.

Header (big-endian, 56 bytes, Kafka-v2-like)::

    0  base_offset        i64   assigned by the log when the batch is appended
    8  batch_length       i32   bytes after this field (whole batch = 12 + batch_length)
    12 leader_epoch       i32   assigned by the leader
    16 magic              i8    format version (2)
    17 crc                u32   CRC32C of bytes [21, end): attributes .. body
    21 attributes         i16   bits 0-2 codec, 4 has_keys, 5 has_headers, 6 key_nulls
    23 last_offset_delta  i32   record_count - 1
    27 first_timestamp    i64   ms since the epoch
    35 max_timestamp      i64
    43 producer_id        i64   -1 when none
    51 record_count       i32
    55 reserved           u8    pads the header to 8 bytes so the body is aligned

The CRC deliberately skips base_offset, batch_length, leader_epoch and magic,
so a server can stamp the offset and epoch into a producer's batch without
recomputing it.

Body (compressed as a whole when a codec is set). Columnar and laid out like
Arrow buffers (little-endian, each section padded to 8 bytes) so a consumer can
wrap the columns in pyarrow arrays without copying:

    timestamp deltas   int64[N]    vs first_timestamp
    offset deltas      int32[N]
    keys (has_keys)    [validity bitmap, only if key_nulls] int32 offsets[N+1], data
    values             int32 offsets[N+1] (starting at 0), data
    headers            int32 offsets[N+1], data (each record's headers as msgpack [[k, v], ...])
"""

from __future__ import annotations

import mmap
import struct
import sys
import time
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import accumulate, repeat
from operator import sub
from typing import Any, Final, Literal, NamedTuple, TypedDict

import crc32c
import msgpack

from contraflow.spu.protocol.compression import Compression, compress, decompress

MAGIC: Final = 2
HEADER = struct.Struct(">qiibIhiqqqix")
HEADER_SIZE: Final = HEADER.size  # 56
LENGTH_PREFIX: Final = 12  # base_offset + batch_length: what precedes the counted bytes
CRC_START: Final = 21  # attributes onwards are covered by the CRC
EPOCH_POS: Final = 12
MAGIC_POS: Final = 16
CRC_POS: Final = 17
PRODUCER_POS: Final = 43
_CRC = struct.Struct(">I")
_STAMP = struct.Struct(">qii")  # base_offset, batch_length, leader_epoch
_STAMP_EPOCH = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")
_PRODUCER = struct.Struct(">q")
_BASE_AND_LENGTH = struct.Struct(">qi")

CODEC_MASK: Final = 0x07
HAS_KEYS: Final = 0x10
HAS_HEADERS: Final = 0x20
KEY_NULLS: Final = 0x40

MAX_BATCH_BYTES: Final = (1 << 31) - 1
_LITTLE: Final = sys.byteorder == "little"

# Bytes an asyncio transport writes as they are (it refuses an mmap: send a memoryview of one).
WireBuffer = bytes | bytearray | memoryview
# Bytes a batch is read from or sent as: a segment's mmap too.
Buffer = WireBuffer | mmap.mmap
Headers = Sequence[tuple[str, bytes]]


class RecordFields(TypedDict, total=False):
    """What records may carry besides their values, one entry per value (`encode_batch`'s names)."""

    keys: Sequence[Buffer | None] | None
    headers: Sequence[Headers] | None
    timestamps: Sequence[int] | None


class RecordExtras(TypedDict, total=False):
    """What one record may carry besides its value (a producer's `send`)."""

    key: Buffer | None
    headers: Headers | None
    timestamp: int | None


class CorruptBatchError(ValueError):
    """A batch whose framing, CRC or body does not check out."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed-size header of a record batch."""

    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    record_count: int

    SIZE = HEADER_SIZE

    @classmethod
    def parse(cls, buf: Buffer, pos: int = 0) -> BatchHeader:
        """Read a header at `pos`; raises CorruptBatchError if it is truncated."""
        if len(buf) - pos < HEADER_SIZE:
            raise CorruptBatchError(f"truncated batch header ({len(buf) - pos} of {HEADER_SIZE} bytes)")
        return cls(*HEADER.unpack_from(buf, pos))

    @property
    def total_size(self) -> int:
        """Size of the whole batch on disk and on the wire."""
        return LENGTH_PREFIX + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & CODEC_MASK)


def batch_size_at(buf: Buffer, pos: int = 0) -> int:
    """Total size of the batch starting at `pos`, read from its length field."""
    _, length = _BASE_AND_LENGTH.unpack_from(buf, pos)
    return int(LENGTH_PREFIX + length)


def compute_crc(buf: Buffer) -> int:
    """CRC32C over the bytes the header's crc field covers."""
    return int(crc32c.crc32c(memoryview(buf)[CRC_START:]))


def verify_crc(buf: Buffer) -> bool:
    """True if the batch in `buf` (exactly one batch) matches its stored CRC."""
    if len(buf) < HEADER_SIZE:
        return False
    (stored,) = _CRC.unpack_from(buf, CRC_POS)
    return bool(stored == compute_crc(buf))


def check_batch(buf: Buffer, *, crc: bool = True) -> BatchHeader:
    """Validate framing, magic, counts and CRC of exactly one batch; return its header.
    `crc=False` leaves the CRC out, for a batch whose CRC its caller checked already."""
    header = BatchHeader.parse(buf)
    if header.magic != MAGIC:
        raise CorruptBatchError(f"unknown batch magic {header.magic} (expected {MAGIC})")
    if header.total_size != len(buf):
        raise CorruptBatchError(f"batch length field says {header.total_size} bytes, got {len(buf)}")
    if header.record_count <= 0 or header.last_offset_delta != header.record_count - 1:
        raise CorruptBatchError(
            f"inconsistent record count {header.record_count} / last offset delta {header.last_offset_delta}"
        )
    if crc and not verify_crc(buf):
        raise CorruptBatchError("batch CRC32C mismatch")
    try:
        Compression(header.attributes & CODEC_MASK)
    except ValueError:
        raise CorruptBatchError(f"unknown codec in attributes {header.attributes:#x}") from None
    return header


def stamp(buf: bytearray | memoryview, base_offset: int, leader_epoch: int | None = None) -> None:
    """Write the offset (and epoch) into a batch in place; the CRC stays valid."""
    _BASE_OFFSET.pack_into(buf, 0, base_offset)
    if leader_epoch is not None:
        _STAMP_EPOCH.pack_into(buf, EPOCH_POS, leader_epoch)


def numbered(batch: Buffer, producer_id: int) -> list[Buffer]:
    """One encoded batch with its producer field set (idempotent produce), as a new header
    and the untouched rest: the CRC is recomputed over both, the body is not copied."""
    view = memoryview(batch)
    header = bytearray(view[:HEADER_SIZE])
    _PRODUCER.pack_into(header, PRODUCER_POS, producer_id)
    crc = crc32c.crc32c(view[HEADER_SIZE:], crc32c.crc32c(memoryview(header)[CRC_START:]))
    _CRC.pack_into(header, CRC_POS, crc)
    return [header, view[HEADER_SIZE:]]


def stamped_prefix(buf: Buffer, base_offset: int, leader_epoch: int | None = None) -> bytes:
    """The first MAGIC_POS bytes of `buf` with offset/epoch replaced: a writer stamps an
    immutable batch by writing this prefix and then `buf[MAGIC_POS:]` (no copy of the body)."""
    _, length, epoch = _STAMP.unpack_from(buf, 0)
    return _STAMP.pack(base_offset, length, epoch if leader_epoch is None else leader_epoch)


# -- encoding ---------------------------------------------------------------------------------------
#
# The produce hot path. Columns are built with C-level loops (struct.pack over
# itertools.accumulate, one bytearray.join of every piece) and never a
# per-record struct.pack. Every large allocation is also a round of page
# faults, so an uncompressed batch is assembled with exactly one: values are
# joined straight into the output, and the CRC is patched in afterwards.


def _pad(n: int) -> bytes:
    return bytes(-n & 7)


def _int32s(values: Iterable[int], count: int) -> bytes:
    try:
        return struct.pack(f"<{count}i", *values)
    except struct.error:
        raise ValueError(f"batch too large: a column exceeds {MAX_BATCH_BYTES} bytes") from None


@lru_cache(maxsize=64)
def _offset_deltas(count: int) -> bytes:
    """0..count-1 as int32, padded: the same for every batch of this size."""
    return struct.pack(f"<{count}i", *range(count)) + _pad(4 * count)


def _binary_column(items: Sequence[Buffer]) -> list[Buffer]:
    """int32 offsets[N+1] + data, both padded: the Arrow binary layout (data not copied here)."""
    count = len(items) + 1
    offsets = _int32s(accumulate(map(len, items), initial=0), count)
    size = struct.unpack_from("<i", offsets, 4 * (count - 1))[0]
    return [offsets, _pad(4 * count), *items, _pad(size)]


def _validity_bitmap(present: Sequence[bool]) -> bytes:
    """Arrow validity bitmap (LSB first); only built when some key is null."""
    out = bytearray((len(present) + 7) // 8)
    for i, flag in enumerate(present):
        if flag:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def _key_column(keys: Sequence[Buffer | None]) -> tuple[int, list[Buffer]]:
    present = [k is not None for k in keys]
    if all(present):
        return HAS_KEYS, _binary_column(keys)  # type: ignore[arg-type]
    bitmap = _validity_bitmap(present)
    filled = [b"" if k is None else k for k in keys]
    return HAS_KEYS | KEY_NULLS, [bitmap, _pad(len(bitmap)), *_binary_column(filled)]


def _timestamps(timestamps: Sequence[int] | None, count: int) -> tuple[int, int, bytes]:
    if timestamps is None:
        now = time.time_ns() // 1_000_000
        return now, now, bytes(8 * count)
    if len(timestamps) != count:
        raise ValueError(f"{len(timestamps)} timestamps for {count} records")
    first = int(timestamps[0])
    deltas = struct.pack(f"<{count}q", *map(sub, timestamps, repeat(first)))
    return first, int(max(timestamps)), deltas


def encode_batch(
    values: Sequence[Buffer],
    keys: Sequence[Buffer | None] | None = None,
    headers: Sequence[Headers] | None = None,
    timestamps: Sequence[int] | None = None,
    compression: Compression | str | None = Compression.NONE,
    *,
    base_offset: int = 0,
    leader_epoch: int = 0,
    producer_id: int = -1,
) -> bytearray:
    """Encode records into one batch (a bytearray, so it can be stamped in place)."""
    count = len(values)
    if count == 0:
        raise ValueError("a batch needs at least one record")
    if keys is not None and len(keys) != count:
        raise ValueError(f"{len(keys)} keys for {count} values")
    if headers is not None and len(headers) != count:
        raise ValueError(f"{len(headers)} header lists for {count} values")
    first_ts, max_ts, ts_deltas = _timestamps(timestamps, count)
    attributes = 0
    body: list[Buffer] = [ts_deltas, _offset_deltas(count)]
    if keys is not None:
        flags, key_parts = _key_column(keys)
        attributes |= flags
        body += key_parts
    body += _binary_column(values)
    if headers is not None and any(headers):
        attributes |= HAS_HEADERS
        body += _binary_column([pack_headers(h) for h in headers])
    return assemble_batch(
        count,
        body,
        attributes,
        (first_ts, max_ts),
        compression,
        base_offset=base_offset,
        leader_epoch=leader_epoch,
        producer_id=producer_id,
    )


BinaryBuffers = tuple[Buffer, Buffer]
"""(int32 little-endian offsets[N+1] starting at 0, data): the Arrow binary layout."""


class TimestampColumn(NamedTuple):
    """A batch's timestamps as stored: first and max (ms) and int64 little-endian deltas."""

    first: int
    max: int
    deltas: Buffer


def binary_buffers(values: Sequence[Buffer]) -> BinaryBuffers:
    """`values` in Arrow's binary layout, as `encode_columns` takes them (offsets packed in C, data joined once)."""
    return _int32s(accumulate(map(len, values), initial=0), len(values) + 1), b"".join(values)


def repeated_buffers(runs: Sequence[tuple[int, bytes]]) -> BinaryBuffers:
    """Runs of one value repeated `count` times each, in Arrow's binary layout, with no step per
    record (numpy ranges for the offsets, bytes repetition for the data): the headers of a
    source's many records that share one packed value."""
    import numpy as np  # only on this path: the log's commands start without numpy

    offsets = [np.zeros(1, dtype=np.int64)]
    data: list[bytes] = []
    end = 0
    for count, value in runs:
        size = len(value)
        offsets.append(np.arange(1, count + 1, dtype=np.int64) * size + end)
        data.append(value * count)
        end += size * count
    if end > MAX_BATCH_BYTES:
        raise ValueError(f"batch too large: a column exceeds {MAX_BATCH_BYTES} bytes")
    return np.concatenate(offsets).astype("<i4").tobytes(), b"".join(data)


def _buffers_section(column: BinaryBuffers, count: int) -> list[Buffer]:
    offsets, data = column
    return [offsets, _pad(4 * (count + 1)), data, _pad(len(data))]


def encode_columns(
    count: int,
    values: BinaryBuffers,
    *,
    keys: tuple[Buffer | None, Buffer, Buffer] | None = None,
    headers: BinaryBuffers | None = None,
    compression: Compression | str | None = Compression.NONE,
    producer_id: int = -1,
    timestamps: TimestampColumn | None = None,
) -> bytearray:
    """Encode a batch from ready columns in Arrow's layout: what a pyarrow BinaryArray
    already holds, so a writer coming from Arrow builds the batch without touching
    single records. `keys` is (validity bitmap or None, offsets, data); `headers`
    holds each record's headers packed as `encode_batch` packs them; without
    `timestamps` every record is stamped now."""
    if count == 0:
        raise ValueError("a batch needs at least one record")
    if timestamps is None:
        now = time.time_ns() // 1_000_000
        timestamps = TimestampColumn(now, now, bytes(8 * count))
    attributes = 0
    body: list[Buffer] = [timestamps.deltas, _offset_deltas(count)]
    if keys is not None:
        validity, *key_column = keys
        attributes |= HAS_KEYS
        if validity is not None:
            attributes |= KEY_NULLS
            body += [validity, _pad(len(validity))]
        body += _buffers_section((key_column[0], key_column[1]), count)
    body += _buffers_section(values, count)
    if headers is not None:
        attributes |= HAS_HEADERS
        body += _buffers_section(headers, count)
    time_range = (timestamps.first, timestamps.max)
    return assemble_batch(count, body, attributes, time_range, compression, producer_id=producer_id)


def pack_headers(headers: Headers) -> bytes:
    """One record's headers as stored in a batch's headers column."""
    return bytes(msgpack.packb(list(headers)))


NO_HEADERS: Final = pack_headers([])  # a record without headers, in a batch whose others have some


def assemble_batch(
    count: int,
    body: list[Buffer],
    attributes: int,
    time_range: tuple[int, int],
    compression: Compression | str | None,
    *,
    base_offset: int = 0,
    leader_epoch: int = 0,
    producer_id: int = -1,
) -> bytearray:
    """Header + (compressed) body sections with the CRC: the one place a batch is framed."""
    codec = Compression.parse(compression)
    if codec is not Compression.NONE:
        body = [compress(codec, b"".join(body))]
    out = bytearray().join([bytes(HEADER_SIZE), *body])
    batch_length = len(out) - LENGTH_PREFIX
    if batch_length > MAX_BATCH_BYTES:
        raise ValueError(f"batch of {batch_length} bytes exceeds the {MAX_BATCH_BYTES}-byte limit")
    fields = (*time_range, producer_id, count)
    HEADER.pack_into(
        out, 0, base_offset, batch_length, leader_epoch, MAGIC, 0, attributes | int(codec), count - 1, *fields
    )
    _CRC.pack_into(out, CRC_POS, compute_crc(out))
    return out


# -- decoding ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    """One record, materialised (use DecodedBatch's columns for bulk work)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


def _int_view(buf: memoryview, typecode: Literal["i", "q"]) -> Sequence[int]:
    """A typed view over little-endian bytes (a copy only on big-endian hosts)."""
    if _LITTLE:
        return buf.cast(typecode)
    arr = array(typecode, buf.tobytes())
    arr.byteswap()
    return arr


class _Cursor:
    """Walks the padded sections of a body."""

    def __init__(self, body: memoryview) -> None:
        self.body = body
        self.pos = 0

    def take(self, size: int) -> memoryview:
        end = self.pos + size
        if end > len(self.body):
            raise CorruptBatchError(f"batch body too short ({len(self.body)} bytes, need {end})")
        view = self.body[self.pos : end]
        self.pos = end + (-size & 7)
        return view

    def binary(self, count: int) -> tuple[memoryview, memoryview]:
        offsets = self.take(4 * (count + 1))
        end = _int_view(offsets, "i")[count]
        return offsets, self.take(end)


@dataclass(frozen=True, slots=True)
class _Columns:
    ts_deltas: memoryview
    offset_deltas: memoryview
    key_validity: memoryview | None
    keys: tuple[memoryview, memoryview] | None
    values: tuple[memoryview, memoryview]
    headers: tuple[memoryview, memoryview] | None


class DecodedBatch:
    """A batch with lazily decoded columns.

    Slices are memoryviews over the buffer handed in (the mmap of a segment for
    local reads), so nothing is copied until a caller asks for bytes.
    """

    def __init__(self, buf: Buffer, header: BatchHeader | None = None) -> None:
        self.buffer = memoryview(buf)
        self.header = header if header is not None else BatchHeader.parse(self.buffer)

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def last_offset(self) -> int:
        return self.header.last_offset

    @property
    def record_count(self) -> int:
        return self.header.record_count

    def __len__(self) -> int:
        return self.header.record_count

    @cached_property
    def _columns(self) -> _Columns:
        header = self.header
        raw = self.buffer[HEADER_SIZE : header.total_size]
        codec = header.compression
        body = memoryview(decompress(codec, raw)) if codec is not Compression.NONE else raw
        n = header.record_count
        cur = _Cursor(body)
        ts = cur.take(8 * n)
        deltas = cur.take(4 * n)
        validity = cur.take((n + 7) // 8) if header.attributes & KEY_NULLS else None
        keys = cur.binary(n) if header.attributes & HAS_KEYS else None
        values = cur.binary(n)
        hdrs = cur.binary(n) if header.attributes & HAS_HEADERS else None
        return _Columns(ts, deltas, validity, keys, values, hdrs)

    # raw buffers, for Arrow -------------------------------------------------------------------------

    def value_buffers(self) -> tuple[memoryview, memoryview]:
        """(int32 little-endian offsets[N+1], data): pyarrow's binary array layout."""
        return self._columns.values

    def key_buffers(self) -> tuple[memoryview | None, memoryview, memoryview] | None:
        """(validity bitmap or None, offsets, data), or None when the batch has no keys."""
        cols = self._columns
        if cols.keys is None:
            return None
        return cols.key_validity, *cols.keys

    def header_buffers(self) -> tuple[memoryview, memoryview] | None:
        """(offsets, data) of the packed headers column, or None when the batch has no headers."""
        return self._columns.headers

    def timestamp_delta_buffer(self) -> memoryview:
        """int64 little-endian deltas against header.first_timestamp."""
        return self._columns.ts_deltas

    def value_array(self) -> Any:
        """The values as a pyarrow BinaryArray sharing this batch's memory."""
        import pyarrow as pa

        offsets, data = self.value_buffers()
        return pa.Array.from_buffers(
            pa.binary(), self.record_count, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )

    def key_array(self) -> Any:
        """The keys as a pyarrow BinaryArray (nulls where absent), sharing memory."""
        import pyarrow as pa

        buffers = self.key_buffers()
        if buffers is None:
            return pa.nulls(self.record_count, pa.binary())
        validity, offsets, data = buffers
        return pa.Array.from_buffers(
            pa.binary(),
            self.record_count,
            [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)],
        )

    def to_arrow(self) -> Any:
        """The batch as a pyarrow RecordBatch: offset int64, timestamp[ms], key, value.
        Keys and values share the batch's memory; offsets and timestamps are
        computed from the delta columns."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n, cols = self.record_count, self._columns
        if _LITTLE:
            deltas = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(cols.offset_deltas)])
            ts_deltas = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.ts_deltas)])
            offsets = pc.add(deltas.cast(pa.int64()), self.base_offset)
            stamps = pc.add(ts_deltas, self.header.first_timestamp)
        else:
            offsets, stamps = pa.array(self.offsets(), pa.int64()), pa.array(self.timestamps(), pa.int64())
        return pa.RecordBatch.from_arrays(
            [offsets, stamps.cast(pa.timestamp("ms")), self.key_array(), self.value_array()],
            names=["offset", "timestamp", "key", "value"],
        )

    # per-record views -------------------------------------------------------------------------------

    @staticmethod
    def _slices(column: tuple[memoryview, memoryview]) -> list[memoryview]:
        offsets_buf, data = column
        offs = list(_int_view(offsets_buf, "i"))
        return list(map(data.__getitem__, map(slice, offs[:-1], offs[1:])))

    def values(self) -> list[memoryview]:
        """Each record's value as a zero-copy slice."""
        return self._slices(self._columns.values)

    def keys(self) -> list[memoryview | None]:
        """Each record's key (None where absent)."""
        cols = self._columns
        if cols.keys is None:
            return [None] * self.record_count
        keys: list[memoryview | None] = list(self._slices(cols.keys))
        if cols.key_validity is not None:
            bitmap = cols.key_validity
            for i in range(len(keys)):
                if not bitmap[i >> 3] >> (i & 7) & 1:
                    keys[i] = None
        return keys

    def headers(self) -> list[list[tuple[str, bytes]]]:
        cols = self._columns
        if cols.headers is None:
            return [[] for _ in range(self.record_count)]
        return [[(k, v) for k, v in msgpack.unpackb(h)] for h in self._slices(cols.headers)]

    def timestamps(self) -> list[int]:
        first = self.header.first_timestamp
        return [first + d for d in _int_view(self._columns.ts_deltas, "q")]

    def offsets(self) -> list[int]:
        base = self.header.base_offset
        return [base + d for d in _int_view(self._columns.offset_deltas, "i")]

    def records(self, start_offset: int | None = None) -> Iterator[Record]:
        """Materialised records, skipping those below `start_offset`."""
        rows = zip(self.offsets(), self.timestamps(), self.keys(), self.values(), self.headers(), strict=True)
        for offset, ts, key, value, hdrs in rows:
            if start_offset is None or offset >= start_offset:
                yield Record(offset, ts, None if key is None else bytes(key), bytes(value), hdrs)


def decode_batch(buf: Buffer, *, verify: bool = False) -> DecodedBatch:
    """Decode the batch at the start of `buf` (which may hold more bytes after it)."""
    header = BatchHeader.parse(buf)
    view = memoryview(buf)[: header.total_size]
    if verify:
        check_batch(view)
    elif len(view) < header.total_size:
        raise CorruptBatchError(f"truncated batch ({len(view)} of {header.total_size} bytes)")
    return DecodedBatch(view, header)


def iter_batches(buf: Buffer) -> Iterator[DecodedBatch]:
    """Decode consecutive whole batches (e.g. a fetch response's payload)."""
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        batch = decode_batch(view[pos:])
        yield batch
        pos += batch.header.total_size
