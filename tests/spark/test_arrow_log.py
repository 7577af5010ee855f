"""Log batches <-> Arrow, buffer to buffer (no Spark needed)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contraflow.spark.arrow_log import (
    Route,
    batches_to_arrow,
    coalesce,
    coalesced_rows,
    encode_rows,
    route_rows,
)
from contraflow.spu.protocol.batch import DecodedBatch, decode_batch, encode_batch, pack_headers


def test_encoded_rows_decode_to_the_same_values_keys_and_headers() -> None:
    rows = pa.table(
        {
            "value": pa.array(["a", "bb", "", "dddd"]),
            "key": pa.array([b"k1", None, b"k3", None]),
            "headers": pa.array(
                [
                    [{"key": "h", "value": b"1"}],
                    [],
                    None,
                    [{"key": "x", "value": b""}, {"key": "y", "value": b"z"}],
                ],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )
    batch = decode_batch(encode_rows(rows), verify=True)
    assert [bytes(v) for v in batch.values()] == [b"a", b"bb", b"", b"dddd"]
    keys = batch.keys()
    assert [None if k is None else bytes(k) for k in keys] == [b"k1", None, b"k3", None]
    assert batch.headers() == [[("h", b"1")], [], [], [("x", b""), ("y", b"z")]]


def test_packed_binary_headers_pass_through_as_they_are() -> None:
    packed = pa.array([pack_headers([("meta", b'{"class":"a"}')]), None], pa.binary())
    batch = decode_batch(encode_rows(pa.table({"value": [b"1", b"2"], "headers": packed})), verify=True)
    assert batch.headers() == [[("meta", b'{"class":"a"}')], []]


@given(st.lists(st.binary(max_size=12), min_size=2, max_size=40), st.data())
def test_sliced_arrays_encode_only_their_rows(values: list[bytes], data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(values) - 1))
    length = data.draw(st.integers(1, len(values) - start))
    table = pa.table({"value": pa.array(values, pa.binary())}).slice(start, length)
    batch = decode_batch(encode_rows(table), verify=True)
    assert [bytes(v) for v in batch.values()] == values[start : start + length]


def _logged(base: int, values: list[bytes], **columns: Any) -> DecodedBatch:
    return decode_batch(encode_batch(values, base_offset=base, **columns))


def test_batches_to_arrow_slices_by_offset_and_keeps_columns() -> None:
    batch = _logged(100, [b"v0", b"v1", b"v2", b"v3"], keys=[b"a", None, b"c", b"d"], timestamps=[5, 6, 7, 8])
    rows = batches_to_arrow("t", 3, [(batch, 101, 103)])
    assert rows is not None
    assert rows.column("offset").to_pylist() == [101, 102]
    assert rows.column("value").to_pylist() == [b"v1", b"v2"]
    assert rows.column("key").to_pylist() == [None, b"c"]
    assert rows.column("partition").to_pylist() == [3, 3]
    assert rows.column("topic").to_pylist() == ["t", "t"]
    assert [t.timestamp() * 1000 for t in rows.column("timestamp").to_pylist()] == [6, 7]
    assert batches_to_arrow("t", 3, [(batch, 104, 200)]) is None


def test_log_batches_merged_before_arrow_give_the_rows_of_each_merged_after() -> None:
    """Merging log batches first (one conversion) gives the rows that converting each log batch
    and merging the Arrow batches gives: offsets in range, keys, timestamps and each record's own
    headers, whether its batch has a headers column or not."""
    marker = [("position", b'{"seq":1}')]
    batches = [
        _logged(0, [b"a", b"b", b"c"], headers=[[], [], marker]),
        _logged(3, [b"d", b"e"], keys=[b"k", None], timestamps=[9, 10]),
        _logged(5, [b"f", b"g", b"h", b"i"], headers=[[("meta", b"{}")], [], [], marker]),
        _logged(9, [b"j"] * 5),
    ]
    pieces = [(batch, 1, 12) for batch in batches]
    one_by_one = [batches_to_arrow("t", 2, [piece]) for piece in pieces]
    expected = pa.Table.from_batches([rows for rows in one_by_one if rows is not None]).to_pylist()
    merged = list(coalesced_rows("t", 2, iter(pieces), max_rows=4, min_rows=3))
    assert [rows.num_rows for rows in merged] == [4, 4, 3]  # a batch of 3+ alone; smaller ones merged
    assert pa.Table.from_batches(merged).to_pylist() == expected
    assert expected[0]["offset"] == 1 and expected[-1]["offset"] == 11
    assert [row["headers"] for row in expected[:3]] == [[], [{"key": "position", "value": b'{"seq":1}'}], []]


def test_coalesce_merges_small_batches_up_to_the_limit() -> None:
    small = [pa.record_batch({"x": [i, i]}) for i in range(5)]
    merged = list(coalesce(small, 4))
    assert [b.num_rows for b in merged] == [4, 4, 2]
    assert [x for b in merged for x in b.column("x").to_pylist()] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_route_rows_by_topic_and_partition_columns() -> None:
    batch = pa.record_batch(
        {
            "value": [b"a", b"b", b"c", b"d"],
            "topic": ["out", "err", "out", None],
            "partition": [0, 0, 1, None],
        }
    )
    routed = {
        route: table.column("value").to_pylist()
        for route, table in route_rows(batch, "dflt", {"out": 2, "err": 1, "dflt": 1}, 0)
    }
    assert routed == {
        Route("out", 0): [b"a"],
        Route("err", 0): [b"b"],
        Route("out", 1): [b"c"],
        Route("dflt", 0): [b"d"],
    }


def test_rows_without_topic_go_to_the_default_topic_spread_by_task() -> None:
    batch = pa.record_batch({"value": [b"a", b"b"]})
    [(route, table)] = list(route_rows(batch, "out", {"out": 3}, 4))
    assert route == Route("out", 1) and table.num_rows == 2
    with pytest.raises(ValueError, match="no 'topic'"):
        list(route_rows(batch, None, {}, 0))


def test_coalesce_passes_big_batches_through_without_copying() -> None:
    big = pa.record_batch({"x": list(range(6))})
    small = [pa.record_batch({"x": [i]}) for i in range(3)]
    out = list(coalesce([big, *small, big], max_rows=8, min_rows=4))
    assert out[0] is big  # the very batch, not a copy
    assert [b.num_rows for b in out] == [6, 3, 6]
    assert out[2] is big
    assert [x for b in out for x in b.column("x").to_pylist()] == [*range(6), 0, 1, 2, *range(6)]
