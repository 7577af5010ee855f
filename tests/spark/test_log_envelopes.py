"""Log batches as envelopes and restamped for the sink, buffer to buffer (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from contraflow.spark import log_envelopes
from contraflow.spark.log_envelopes import (
    envelope_rows,
    envelope_views,
    envelopes,
    forwardable,
    recompressed,
)
from contraflow.spu.protocol.batch import (
    HAS_KEYS,
    Headers,
    check_batch,
    decode_batch,
    encode_batch,
)
from contraflow.spu.protocol.compression import Compression
from contraflow.spu.protocol.range_stage import MIN_RECORDS, restamped


def log_batch(
    base: int,
    count: int,
    *,
    keys: bool = False,
    headers: bool = True,
    compression: Compression = Compression.NONE,
) -> log_envelopes.DecodedBatch:
    """A stored batch of `count` records from offset `base` (values say their offset)."""
    values = [b'{"n":%d}' % (base + i) for i in range(count)]
    hdrs: list[Headers] | None = (
        [[("meta", b'{"i":%d}' % (base + i))] if i % 3 else [] for i in range(count)] if headers else None
    )
    encoded = encode_batch(
        values,
        keys=[b"k%d" % i for i in range(count)] if keys else None,
        headers=hdrs,
        timestamps=[1_000 + i for i in range(count)],
        compression=compression,
        base_offset=base,
        producer_id=(7 << 31) | 3,
    )
    return decode_batch(encoded, verify=True)


def staged_records(parts: list[log_envelopes.Buffer]) -> log_envelopes.DecodedBatch:
    """The batch the SPU gets from the sink's parts, checked as the SPU checks a staged batch."""
    joined = b"".join(bytes(p) for p in parts)
    check_batch(joined)
    return decode_batch(joined)


def contents(batch: log_envelopes.DecodedBatch) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    return [(bytes(v), h) for v, h in zip(batch.values(), batch.headers(), strict=True)]


def test_a_whole_plain_batch_is_its_own_envelope_byte_for_byte() -> None:
    batch = log_batch(100, MIN_RECORDS)
    assert forwardable(batch, 100, 100 + MIN_RECORDS)
    assert [bytes(e) for e in envelopes([batch], 100, 100 + MIN_RECORDS)] == [bytes(batch.buffer)]


@pytest.mark.parametrize(
    "batch",
    [
        log_batch(0, MIN_RECORDS, keys=True),
        log_batch(0, MIN_RECORDS, compression=Compression.ZSTD),
        log_batch(0, 10),
    ],
    ids=["keys", "compressed", "small"],
)
def test_other_batches_are_reencoded_with_the_same_values_and_headers(batch) -> None:
    (envelope,) = envelopes([batch], 0, batch.record_count)
    assert envelope is not batch.buffer
    out = staged_records(restamped(memoryview(envelope), 5_000))
    assert contents(out) == contents(batch)
    assert not out.header.attributes & HAS_KEYS


def test_a_range_cut_through_batches_keeps_only_its_records() -> None:
    first, second = log_batch(0, MIN_RECORDS), log_batch(MIN_RECORDS, MIN_RECORDS)
    start, end = 5, MIN_RECORDS + 7
    out = [staged_records(restamped(memoryview(e), 1)) for e in envelopes([first, second], start, end)]
    values = [bytes(v) for batch in out for v in batch.values()]
    assert values == [b'{"n":%d}' % i for i in range(start, end)]


def test_small_batches_are_merged_into_envelopes_in_offset_order() -> None:
    small = [log_batch(i * 100, 100, headers=i % 2 == 0) for i in range(50)]
    big = log_batch(5_000, MIN_RECORDS)
    found = list(envelopes([*small[:30], big, *small[30:]], 0, 10_000))
    # 30 small ones merged (3,000 >= MIN_RECORDS records), the big one as it is, the rest merged.
    assert [decode_batch(e).record_count for e in found] == [2_100, 900, MIN_RECORDS, 2_000]
    assert found[2] is big.buffer
    expected = [r for b in [*small[:30], big, *small[30:]] for r in contents(b)]
    assert [r for e in found for r in contents(decode_batch(e))] == expected


def test_restamped_batches_carry_the_time_no_producer_and_a_valid_crc() -> None:
    batch = log_batch(40, MIN_RECORDS)
    out = staged_records(restamped(batch.buffer, 123_456))
    assert out.header.producer_id == -1
    assert out.header.base_offset == 0
    assert set(out.timestamps()) == {123_456}
    assert contents(out) == contents(batch)


def test_envelope_rows_round_trip_through_arrow() -> None:
    batches = [log_batch(0, MIN_RECORDS), log_batch(MIN_RECORDS, MIN_RECORDS, headers=False)]
    rows = envelope_rows(b.buffer for b in batches)
    assert rows is not None
    assert rows.column("records").to_pylist() == [MIN_RECORDS, MIN_RECORDS]
    sliced = pa.concat_arrays([rows.column("batch")]).slice(1)  # a column that starts mid-buffer
    assert [bytes(v) for v in envelope_views(sliced)] == [bytes(batches[1].buffer)]
    assert envelope_rows([]) is None


def test_a_compressing_sink_reencodes_the_envelope() -> None:
    batch = log_batch(0, MIN_RECORDS)
    out = decode_batch(recompressed(batch.buffer, "zstd"), verify=True)
    assert out.header.compression is Compression.ZSTD
    assert contents(out) == contents(batch)
