"""The avro codec's batch decode gives, frame for frame, what its one-frame decode gives, bad frames included."""

from __future__ import annotations

import io
import re
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contraflow.codecs import CodecError, avro_codec, codec
from contraflow.codecs.avro_columns import plan

INNER = {"type": "record", "name": "Inner", "fields": [{"name": "code", "type": "int"}]}
WIDE = {
    "type": "record",
    "name": "Wide",
    "namespace": "batch",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "small", "type": "int"},
        {"name": "ratio", "type": "double"},
        {"name": "share", "type": "float"},
        {"name": "name", "type": "string"},
        {"name": "payload", "type": "bytes"},
        {"name": "ok", "type": "boolean"},
        {"name": "nothing", "type": "null"},
        {"name": "parent", "type": ["null", "long"]},
        {"name": "either", "type": ["string", "null", "double", INNER]},
        {"name": "level", "type": {"type": "enum", "name": "Level", "symbols": ["LOW", "MID", "HIGH"]}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 3}},
        {"name": "inner", "type": "Inner"},
        {"name": "empty", "type": {"type": "record", "name": "Empty", "fields": []}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
LISTS = {  # arrays and maps are read one record at a time
    "type": "record",
    "name": "Lists",
    "fields": [{"name": "tags", "type": {"type": "array", "items": "string"}}, {"name": "n", "type": "long"}],
}
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
WIDE_VALUES = st.fixed_dictionaries(
    {
        "id": INT64,
        "small": INT32,
        "ratio": st.floats(),
        "share": st.floats(width=32),
        "name": st.text(),
        "payload": st.binary(),
        "ok": st.booleans(),
        "nothing": st.none(),
        "parent": st.none() | INT64,
        "either": st.none() | st.text() | st.floats() | st.fixed_dictionaries({"code": INT32}),
        "level": st.sampled_from(["LOW", "MID", "HIGH"]),
        "digest": st.binary(min_size=3, max_size=3),
        "inner": st.fixed_dictionaries({"code": INT32}),
        "empty": st.just({}),
        "at": INT64,
    }
)
# What a damaged frame can be: cut, lengthened, a byte changed, another magic byte or schema id.
DAMAGE = st.one_of(
    st.tuples(st.just("cut"), st.integers(0, 64)),
    st.tuples(st.just("extend"), st.binary(min_size=1, max_size=4)),
    st.tuples(st.just("flip"), st.integers(5, 200), st.integers(1, 255)),
    st.tuples(st.just("magic"), st.integers(1, 255)),
    st.tuples(st.just("unknown id"), st.just(999_999)),
)


def damaged(frame: bytes, damage: tuple[Any, ...]) -> bytes:
    kind, arg = damage[0], damage[1]
    if kind == "cut":
        return frame[:arg]
    if kind == "extend":
        return frame + arg
    if kind == "flip" and frame:
        at = arg % len(frame)
        return frame[:at] + bytes([frame[at] ^ damage[2]]) + frame[at + 1 :]
    if kind == "magic":
        return bytes([arg]) + frame[1:]
    if kind != "unknown id":
        return frame
    return b"\x00" + int(arg).to_bytes(4, "big") + frame[5:]


def outcome(result: Any) -> str:
    """A result as comparable text: the error's message (fastavro names its stream by address), or
    the value's repr (exact types, NaN, -0.0)."""
    if isinstance(result, CodecError):
        return "error: " + re.sub(r" at 0x[0-9a-f]+", "", str(result))
    return repr(result)


def assert_batch_is_frame_by_frame(decoder: Any, frames: list[bytes]) -> None:
    batch = decoder.decode_batch(frames)
    assert [outcome(r) for r in batch] == [outcome(decoder.decoded_or_error(f)) for f in frames]


SMALL_BULK = 8


@pytest.fixture()
def codecs(registry_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Any]:
    """The codecs, with bulk reads from SMALL_BULK frames on (a speed knob), so small batches take it."""
    monkeypatch.setattr(avro_codec, "BULK_MIN", SMALL_BULK)

    def avro(**config: Any) -> Any:
        return codec({"name": "avro", "config": {"registry": registry_url, **config}})

    return avro(subject="wide-value", schema=WIDE), avro(subject="lists-value", schema=LISTS), avro()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    values=st.lists(WIDE_VALUES, min_size=SMALL_BULK, max_size=24),
    damages=st.lists(st.tuples(st.integers(0, 23), DAMAGE), max_size=4),
    lists=st.lists(st.fixed_dictionaries({"tags": st.lists(st.text(), max_size=2), "n": INT64}), max_size=3),
)
def test_a_batch_decodes_as_its_frames_do_one_by_one(
    codecs: tuple[Any, Any, Any], values: list[Any], damages: list[Any], lists: list[Any]
) -> None:
    wide, other, decoder = codecs
    frames = [wide.encode(value) for value in values]
    for at, damage in damages:
        frames[at % len(frames)] = damaged(frames[at % len(frames)], damage)
    if not damages:
        in_schema_order = [
            {field["name"]: value[field["name"]] for field in WIDE["fields"]} for value in values
        ]
        assert list(map(outcome, decoder.decode_batch(frames))) == list(map(repr, in_schema_order))
    frames[1:1] = [other.encode(value) for value in lists]  # another schema in the same batch
    assert_batch_is_frame_by_frame(decoder, frames)


def test_bad_frames_in_a_batch_keep_their_own_errors(codecs: tuple[Any, Any, Any]) -> None:
    wide, _, decoder = codecs
    value = {
        "id": 1,
        "small": 2,
        "ratio": 0.5,
        "share": 0.25,
        "name": "é",
        "payload": b"\x00",
        "ok": True,
        "nothing": None,
        "parent": None,
        "either": {"code": 7},
        "level": "MID",
        "digest": b"abc",
        "inner": {"code": -1},
        "empty": {},
        "at": 0,
    }
    good = wide.encode(value)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(WIDE), value)
    assert good[5:] == body.getvalue()  # the codec's own call of fastavro's writer writes the same bytes
    name_at = good.index("é".encode())
    frames = (
        [good] * SMALL_BULK
        + [
            good + b"\x00",  # a byte after the record
            good[:-1],  # cut in the last field
            good[:name_at] + b"\xff\xff" + good[name_at + 2 :],  # a string that is not UTF-8
            b"\x00" + (10_000).to_bytes(4, "big") + good[5:],  # a schema id the registry does not have
            b"\x01" + good[1:],
            b"\x00\x00",
        ]
    )
    results = decoder.decode_batch(frames)
    assert results[:SMALL_BULK] == [value] * SMALL_BULK
    reasons = [str(result) for result in results[SMALL_BULK:]]
    for reason, expected in zip(
        reasons,
        [
            "1 bytes after the record",
            "not a record of schema",
            "not a record of schema",
            "Schema 10000 not found",
            "magic byte 1",
            "too short",
        ],
        strict=True,
    ):
        assert expected in reason


def test_schemas_with_arrays_maps_or_recursion_have_no_bulk_reader() -> None:
    def bulk_reader(schema: Any) -> Any:
        names: dict[str, Any] = {}
        return plan(fastavro.parse_schema(schema, named_schemas=names), names)

    node = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]}
    assert bulk_reader(node) is None
    assert bulk_reader(LISTS) is None
    assert bulk_reader({"type": "map", "values": "long"}) is None
    assert bulk_reader(WIDE) is not None
    assert bulk_reader("string") is not None
