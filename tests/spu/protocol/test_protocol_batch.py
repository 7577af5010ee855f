"""Record batch encoding: round trips, CRC coverage, in-place stamping, Arrow views."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contraflow.spu.protocol.batch import (
    HEADER_SIZE,
    MAGIC_POS,
    BatchHeader,
    CorruptBatchError,
    binary_buffers,
    check_batch,
    decode_batch,
    encode_batch,
    iter_batches,
    numbered,
    repeated_buffers,
    stamp,
    stamped_prefix,
    verify_crc,
)
from contraflow.spu.protocol.compression import Compression

CODECS = list(Compression)


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_with_every_codec(codec: Compression) -> None:
    values = [b"alpha", b"", b"gamma" * 50]
    keys = [b"k1", None, b""]
    headers = [[("trace", b"1"), ("trace", b"2")], [], [("x", b"")]]
    batch = decode_batch(encode_batch(values, keys, headers, [30, 10, 20], compression=codec), verify=True)
    assert batch.header.compression is codec
    assert [bytes(v) for v in batch.values()] == values
    assert [None if k is None else bytes(k) for k in batch.keys()] == keys  # noqa: SIM118 (not a dict)
    assert batch.headers() == headers
    assert batch.timestamps() == [30, 10, 20]
    assert (batch.header.first_timestamp, batch.header.max_timestamp) == (30, 30)
    assert batch.offsets() == [0, 1, 2]


def test_compression_shrinks_repetitive_batches() -> None:
    values = [b'{"user": "someone", "action": "click", "n": 1}'] * 500
    plain = len(encode_batch(values))
    for codec in (Compression.GZIP, Compression.ZSTD, Compression.LZ4):
        assert len(encode_batch(values, compression=codec)) < plain / 5


@given(
    values=st.lists(st.binary(max_size=40), min_size=1, max_size=30),
    data=st.data(),
)
@settings(max_examples=60, deadline=None)
def test_any_flipped_covered_byte_fails_the_crc(values: list[bytes], data: st.DataObject) -> None:
    raw = bytearray(encode_batch(values, compression=data.draw(st.sampled_from(CODECS))))
    pos = data.draw(st.integers(min_value=21, max_value=len(raw) - 1))
    raw[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
    assert not verify_crc(raw)
    with pytest.raises(CorruptBatchError):
        check_batch(raw)


def test_stamping_keeps_the_crc_valid() -> None:
    raw = bytearray(encode_batch([b"a", b"b"]))
    stamp(raw, 1234, leader_epoch=7)
    header = check_batch(raw)
    assert (header.base_offset, header.leader_epoch, header.last_offset) == (1234, 7, 1235)
    assert decode_batch(raw).offsets() == [1234, 1235]


def test_stamped_prefix_rewrites_only_offset_and_epoch() -> None:
    raw = encode_batch([b"a"])
    rebuilt = stamped_prefix(raw, 99, 3) + raw[MAGIC_POS:]
    header = check_batch(rebuilt)
    assert (header.base_offset, header.leader_epoch, header.crc) == (99, 3, BatchHeader.parse(raw).crc)


def test_value_buffers_build_an_arrow_array_without_copying() -> None:
    raw = encode_batch([b"one", b"two", b"three"])
    batch = decode_batch(raw)
    array = batch.value_array()
    assert array.to_pylist() == [b"one", b"two", b"three"]
    offsets, data = batch.value_buffers()
    assert pa.py_buffer(data).address == array.buffers()[2].address
    assert bytes(data) == b"onetwothree"


def test_truncated_and_inconsistent_batches_are_rejected() -> None:
    raw = encode_batch([b"x", b"y"])
    with pytest.raises(CorruptBatchError):
        BatchHeader.parse(raw[: HEADER_SIZE - 1])
    with pytest.raises(CorruptBatchError):
        check_batch(raw[:-1])
    with pytest.raises(ValueError):
        encode_batch([])
    with pytest.raises(ValueError):
        encode_batch([b"a"], keys=[b"k", b"extra"])


def test_iter_batches_walks_consecutive_batches() -> None:
    payload = encode_batch([b"a"]) + encode_batch([b"b", b"c"])
    assert [[bytes(v) for v in b.values()] for b in iter_batches(payload)] == [[b"a"], [b"b", b"c"]]


def test_records_skip_below_start_offset() -> None:
    raw = bytearray(encode_batch([b"a", b"b", b"c"], keys=[b"k", None, b"m"], timestamps=[1, 2, 3]))
    stamp(raw, 10)
    records = list(decode_batch(raw).records(start_offset=11))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in records] == [
        (11, None, b"b", 2),
        (12, b"m", b"c", 3),
    ]


records_strategy = st.lists(
    st.tuples(
        st.binary(max_size=50),
        st.none() | st.binary(max_size=10),
        st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=2),
        st.integers(min_value=0, max_value=2**41),
    ),
    min_size=1,
    max_size=40,
)


@given(records=records_strategy, codec=st.sampled_from(CODECS), with_keys=st.booleans())
@settings(max_examples=80, deadline=None)
def test_random_records_round_trip(
    records: list[tuple[bytes, bytes | None, list[tuple[str, bytes]], int]],
    codec: Compression,
    with_keys: bool,
) -> None:
    values, keys, headers, stamps = (list(column) for column in zip(*records, strict=True))
    raw = encode_batch(values, keys if with_keys else None, headers, stamps, compression=codec)
    batch = decode_batch(raw, verify=True)
    assert [bytes(v) for v in batch.values()] == values
    assert batch.value_array().to_pylist() == values
    table = batch.to_arrow()
    assert table.column("key").to_pylist() == (keys if with_keys else [None] * len(values))
    assert table.column("value").to_pylist() == values
    assert table.column("offset").to_pylist() == list(range(len(values)))
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == stamps
    expected_keys = keys if with_keys else [None] * len(values)
    assert [None if k is None else bytes(k) for k in batch.keys()] == expected_keys  # noqa: SIM118 (not a dict)
    assert batch.headers() == headers
    assert batch.timestamps() == stamps
    assert batch.header.max_timestamp == max(stamps)
    assert batch.record_count == len(values)


def test_a_numbered_batch_keeps_its_records_and_gets_a_valid_crc() -> None:
    original = bytes(encode_batch([b"a", b"bb"], [b"k", None], compression=Compression.LZ4))
    header, body = numbered(original, 12345)
    batch = bytes(header) + bytes(body)
    assert check_batch(batch).producer_id == 12345
    assert [bytes(v) for v in decode_batch(batch).values()] == [b"a", b"bb"]
    assert BatchHeader.parse(original).producer_id == -1, "the caller's batch is left alone"


def test_repeated_runs_are_the_binary_layout_of_the_values_one_by_one() -> None:
    runs = [(3, b"ab"), (2, b""), (1, b"xyz")]
    values = [value for count, value in runs for _ in range(count)]
    assert repeated_buffers(runs) == binary_buffers(values)
    offsets, data = binary_buffers(values)
    assert offsets == struct.pack("<7i", 0, 2, 4, 6, 6, 6, 9) and data == b"ababab" + b"xyz"
