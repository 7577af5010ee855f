"""Every codec: values survive encode -> decode with their types; Tremor's encoding fallbacks."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from codecs_support import FLOATS, I64, MODEST, RELAXED, SCALARS, TEXT, assert_same, values
from hypothesis import given
from hypothesis import strategies as st

from contraflow.codecs import CodecError, codec

WITH_BYTES = SCALARS | st.binary(max_size=16)


@RELAXED
@given(values())
def test_json_round_trip_keeps_ints_and_floats_apart(value: Any) -> None:
    json = codec("json")
    assert_same(json.decode(json.encode(value)), value)


@RELAXED
@given(values(WITH_BYTES))
def test_msgpack_round_trip(value: Any) -> None:
    msgpack = codec("msgpack")
    assert_same(msgpack.decode(msgpack.encode(value)), value)


@RELAXED
@given(values(WITH_BYTES))
def test_yaml_round_trip(value: Any) -> None:
    yaml = codec("yaml")
    assert_same(yaml.decode(yaml.encode(value)), value)


@RELAXED
@given(st.binary())
def test_binary_round_trip_is_identity(data: bytes) -> None:
    binary = codec("binary")
    decoded = binary.decode(data)
    assert type(decoded) is bytes and decoded == data
    assert binary.encode(decoded) == data


@RELAXED
@given(st.text())
def test_string_round_trip(text: str) -> None:
    string = codec("string")
    assert string.encode(text) == text.encode("utf-8")
    assert string.decode(text.encode("utf-8")) == text


@RELAXED
@given(st.lists(TEXT, max_size=6))
def test_csv_round_trip_of_string_arrays(fields: list[str]) -> None:
    csv = codec("csv")
    line = csv.encode(fields)
    assert not line.endswith(b"\n")
    assert csv.decode(line) == fields


def test_json_numbers_keep_their_types() -> None:
    assert_same(
        codec("json").decode(b'{"i": 1, "f": 1.0, "e": 1e3, "n": -0}'),
        {"i": 1, "f": 1.0, "e": 1000.0, "n": 0},
    )


def test_json_mode_sorted_sorts_keys_and_unsorted_keeps_order() -> None:
    value = {"b": 1, "a": {"d": 2, "c": 3}}
    assert codec({"name": "json", "config": {"mode": "sorted"}}).encode(value) == b'{"a":{"c":3,"d":2},"b":1}'
    assert (
        codec({"name": "json", "config": {"mode": "unsorted"}}).encode(value) == b'{"b":1,"a":{"d":2,"c":3}}'
    )
    assert codec("json").encode(value) == b'{"b":1,"a":{"d":2,"c":3}}'


def test_json_duplicate_keys_last_wins() -> None:
    assert codec("json").decode(b'{"key": 1, "key": 2}') == {"key": 2}


def test_json_writes_bytes_as_array_of_byte_values() -> None:
    assert codec("json").encode({"b": b"\x00\xff"}) == b'{"b":[0,255]}'


@pytest.mark.parametrize("name", ["string", "binary"])
def test_string_and_binary_encode_other_values_as_json(name: str) -> None:
    assert codec(name).encode(["snot badger", 1]) == b'["snot badger",1]'
    assert codec(name).encode("text") == b"text"


def test_binary_encodes_bytes_likes_unchanged() -> None:
    binary = codec("binary")
    assert binary.encode(bytearray(b"ab")) == b"ab"
    assert binary.encode(memoryview(b"cd")) == b"cd"


@RELAXED
@given(st.lists(SCALARS | I64 | FLOATS, max_size=5))
def test_csv_encodes_non_strings_as_json_text(items: list[Any]) -> None:
    json = codec("json")
    decoded = codec("csv").decode(codec("csv").encode(items))
    expected = [item if isinstance(item, str) else json.encode(item).decode() for item in items]
    assert decoded == expected


def test_csv_decodes_rfc4180_quoting_and_only_the_first_record() -> None:
    csv = codec("csv")
    assert csv.decode(b'"some "" field",1234567,other_text,"2020-01-01 00:00:00"') == [
        'some " field',
        "1234567",
        "other_text",
        "2020-01-01 00:00:00",
    ]
    assert csv.decode(b"a,b\nc,d\n") == ["a", "b"]
    assert csv.decode(b"") == []


def test_yaml_sets_become_lists() -> None:
    assert codec("yaml").decode(b"tags: !!set {a, b}\n") == {"tags": ["a", "b"]}


def test_yaml_keeps_dates_as_strings() -> None:
    assert codec("yaml").decode(b"day: 2020-01-01\nat: 2001-12-14t21:59:43.10-05:00\n") == {
        "day": "2020-01-01",
        "at": "2001-12-14t21:59:43.10-05:00",
    }


def test_codecs_advertise_mime_types() -> None:
    assert "application/json" in codec("json").mime_types
    assert "text/csv" in codec("csv").mime_types


def test_csv_quotes_fields_with_line_breaks() -> None:
    csv = codec("csv")
    fields = ["a\rb", "c\nd", "e,f", 'g"h']
    assert csv.encode(fields) == b'"a\rb","c\nd","e,f","g""h"'
    assert csv.decode(csv.encode(fields)) == fields


def test_msgpack_timestamps_decode_to_epoch_nanoseconds() -> None:
    wire = msgpack.packb({"at": msgpack.Timestamp(seconds=1_700_000_000, nanoseconds=5)})
    assert codec("msgpack").decode(wire) == {"at": 1_700_000_000_000_000_005}


U64 = st.integers(min_value=2**63, max_value=2**64 - 1)


@MODEST
@given(values(WITH_BYTES | U64))
def test_tremor_round_trip_keeps_every_value_and_type(value: Any) -> None:
    tremor = codec("tremor")
    assert_same(tremor.decode(tremor.encode(value)), value)


def test_tremor_writes_tremors_layout() -> None:
    """Version 0, then a type byte and big-endian u64 lengths, as tremor-codec's tremor.rs writes them."""
    tremor = codec("tremor")
    assert tremor.encode([42, -1]) == bytes.fromhex(
        "0000 08 0000000000000002 03 000000000000002a 03 ffffffffffffffff"
    )
    assert tremor.encode({"a": None}) == bytes.fromhex("0000 09 0000000000000001 0000000000000001 61 00")
    assert tremor.encode(2**63) == bytes.fromhex("0000 04 8000000000000000")
    assert tremor.encode("🦡") == bytes.fromhex("0000 06 0000000000000004") + "🦡".encode()


def test_tremor_refuses_values_nested_too_deep() -> None:
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(CodecError, match="nested deeper than 255"):
        codec("tremor").encode(deep)


def test_null_decodes_everything_to_null_and_encodes_nothing() -> None:
    null = codec("null")
    assert null.decode(b"anything at all") is None
    assert null.encode({"a": 1}) == b""
