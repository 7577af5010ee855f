"""The column-wise Kafka record codec against aiokafka's record-by-record one (the reference):
every codec, null and empty keys and values, headers, varint size boundaries, and
damaged batches that must be refused with CORRUPT_MESSAGE rather than stored."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from contraflow.spu.kafka.errors import KafkaError, KafkaErrorCode
from contraflow.spu.kafka.records import from_kafka, to_kafka
from contraflow.spu.kafka.rows import record_starts
from contraflow.spu.kafka.varints import VarintColumn, VarintError, decode_varints, packed_rows
from contraflow.spu.protocol.batch import compute_crc, decode_batch

BASE_TS = 1_700_000_000_000
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
Row = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def kafka_batch(rows: list[Row], codec: int = 0, step_ms: int = 37) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 31)
    for i, (key, value, headers) in enumerate(rows):
        builder.append(i, BASE_TS + i * step_ms, key, value, headers)
    return bytes(builder.build())


def random_rows(count: int, rng: random.Random) -> list[Row]:
    keys = [None, b"", b"key", bytes(300)]
    values = [None, b"", b"v" * 63, b"v" * 64, b"w" * 8192, bytes(rng.randrange(200))]
    headers: list[list[tuple[str, bytes | None]]] = [[], [("a", b"1")], [("é" * 70, None), ("b", b"z" * 150)]]
    return [(rng.choice(keys), rng.choice(values), rng.choice(headers)) for _ in range(count)]


def read_kafka(
    raw: bytes,
) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    batch = DefaultRecordBatch(raw)
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in batch]  # type: ignore[misc]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("count", [1, 64, 65, 300])
def test_kafka_batches_survive_the_log_and_back(codec: str, count: int) -> None:
    rows = random_rows(count, random.Random(count))
    produced = from_kafka(memoryview(kafka_batch(rows, CODECS[codec])))
    log_batch = decode_batch(produced.log_batch, verify=True)
    # Null values are stored empty (the log has no null value); everything else as sent.
    assert [(r.key, r.value, r.headers, r.timestamp) for r in log_batch.records()] == [
        (key, value or b"", headers, BASE_TS + i * 37) for i, (key, value, headers) in enumerate(rows)
    ]
    assert (produced.as_sent is None) == any(value is None for _, value, _ in rows)
    served = read_kafka(b"".join(to_kafka(memoryview(produced.log_batch))))
    assert served == [
        (i, BASE_TS + i * 37, key, value or b"", headers) for i, (key, value, headers) in enumerate(rows)
    ]


def test_served_batches_keep_the_log_codec_offsets_and_time_range() -> None:
    produced = from_kafka(memoryview(kafka_batch([(None, b"x", [])] * 3, CODECS["zstd"], step_ms=-5)))
    log_batch = bytearray(produced.log_batch)
    struct.pack_into(">q", log_batch, 0, 1000)  # the offset the log assigned
    served = b"".join(to_kafka(memoryview(log_batch)))
    batch = DefaultRecordBatch(served)
    assert (batch.base_offset, batch.compression_type, batch.next_offset) == (1000, 4, 1003)
    assert (batch.first_timestamp, batch.max_timestamp) == (BASE_TS, BASE_TS)
    assert [r.timestamp for r in batch] == [BASE_TS, BASE_TS - 5, BASE_TS - 10]


def _with_body(body: bytes, count: int, attributes: int = 0) -> memoryview:
    """A Kafka batch framing `body` as it is (valid CRC), whatever the body holds."""
    header = struct.pack(
        ">qiibIhiqqqhii", 0, 49 + len(body), -1, 2, 0, attributes, count - 1, 0, 0, -1, -1, -1, count
    )
    out = bytearray(header + body)
    struct.pack_into(">I", out, 17, compute_crc(out))
    return memoryview(out)


def _body_of(rows: list[Row]) -> bytes:
    return kafka_batch(rows)[61:]


GOOD = _body_of([(b"k", b"value", [("h", b"v")]), (None, b"second", [])])


@pytest.mark.parametrize(
    ("body", "count", "says"),
    [
        (GOOD[:-3], 2, "runs 3 bytes past the batch"),
        (GOOD + b"\x00", 2, "left over"),
        (GOOD, 3, "ends inside record"),
        (GOOD, (1 << 31) - 1, "claims 2147483647 records in"),
        (b"\x02" + GOOD[1:], 2, "claims 1 bytes"),  # a first record of length 1
        (b"\xff\xff\xff\xff\xff\x01\x00", 1, "longer than 5 bytes"),
        (b"\x0c\x00\x00\x00\x0b\x00\x00", 1, "negative"),  # key length -6
        (b"\x10\x00\x00\x00\x01\x02\x41\x00\x00", 1, "do not add up"),  # 7 bytes of fields in 8
        (b"\x10\x00\x00\x00\x01\x00\x02\x02\x68", 1, "headers run past"),  # a header cut short
    ],
)
def test_damaged_record_framing_is_refused(body: bytes, count: int, says: str) -> None:
    with pytest.raises(KafkaError, match=says) as caught:
        from_kafka(_with_body(body, count))
    assert caught.value.code == KafkaErrorCode.CORRUPT_MESSAGE


def test_bad_crc_damaged_compression_and_transactions_are_refused() -> None:
    good = bytearray(kafka_batch([(None, b"x" * 100, [])] * 4, CODECS["lz4"]))
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF
    with pytest.raises(KafkaError, match="CRC32C") as crc:
        from_kafka(memoryview(flipped))
    with pytest.raises(KafkaError, match="decompress") as codec:
        from_kafka(_with_body(bytes(good[61:-10]), 4, attributes=3))
    with pytest.raises(KafkaError, match="transactional") as txn:
        from_kafka(_with_body(_body_of([(None, b"x", [])]), 1, attributes=0x10))
    assert crc.value.code == codec.value.code == KafkaErrorCode.CORRUPT_MESSAGE
    assert txn.value.code == KafkaErrorCode.INVALID_REQUEST


def _reference_starts(body: bytes) -> list[tuple[int, int]]:
    """(start after the length varint, length) of each record, stepped one by one."""
    out, pos = [], 0
    while pos < len(body):
        unsigned, shift = 0, 0
        while True:
            byte = body[pos]
            pos += 1
            unsigned |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        length = (unsigned >> 1) ^ -(unsigned & 1)
        out.append((pos, length))
        pos += length
    return out


SIZE_PATTERNS = {
    "equal": lambda i: 200,
    "runs": lambda i: [10, 10, 300, 9000][(i // 37) % 4],
    "alternating": lambda i: 50 + i % 2,
    "random": lambda i: (i * 7919) % 500,
}


@pytest.mark.parametrize("pattern", SIZE_PATTERNS)
def test_record_starts_match_stepping_one_by_one(pattern: str) -> None:
    """Runs of equal sizes are taken at once; whatever the sizes, the starts are exact."""
    sizes = SIZE_PATTERNS[pattern]
    body = kafka_batch([(None, bytes(sizes(i)), []) for i in range(2000)])[61:]
    starts, lengths = record_starts(memoryview(body), 2000)
    assert list(zip(starts.tolist(), lengths.tolist(), strict=True)) == _reference_starts(body)


EDGES = [0, -1, 1, 63, -64, 64, -65, 8191, 8192, (1 << 31) - 1, -(1 << 31), (1 << 62), -(1 << 63)]


def test_varint_columns_match_kafkas_encoding_and_decode_back() -> None:
    column = VarintColumn(np.array(EDGES, dtype=np.int64))
    sizes, packed = packed_rows([column])
    reference = b"".join(_reference_varint(v) for v in EDGES)
    assert packed.tobytes() == reference
    assert list(sizes) == [len(_reference_varint(v)) for v in EDGES]
    starts = np.cumsum([0, *sizes[:-1]], dtype=np.int64)
    values, decoded_sizes = decode_varints(np.frombuffer(reference, dtype=np.uint8), starts, 10)
    assert list(values) == EDGES and list(decoded_sizes) == list(sizes)
    with pytest.raises(VarintError, match="past the end"):
        decode_varints(np.frombuffer(b"\x80\x80", dtype=np.uint8), np.array([0]), 5)
    with pytest.raises(VarintError, match="no end within 5"):
        decode_varints(np.frombuffer(b"\x80" * 6, dtype=np.uint8), np.array([0]), 5)


def _reference_varint(value: int) -> bytes:
    """Kafka's zigzag varint, byte by byte as its documentation spells it out."""
    unsigned = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while True:
        byte, unsigned = unsigned & 0x7F, unsigned >> 7
        out.append(byte | (0x80 if unsigned else 0))
        if not unsigned:
            return bytes(out)
