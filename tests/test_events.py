"""The channel event format: JSON values, meta and origin headers, raw pass-through."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from contraflow.events import Event, decode_value, encode_value, event_from_record

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text() | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_values_round_trip_including_bytes(value) -> None:
    assert decode_value(encode_value(value)) == value


def test_untouched_event_keeps_its_raw_bytes() -> None:
    raw = b'{"b": 1,   "a": 2}'
    event = Event.from_raw(raw)
    assert event.channel_bytes() is raw
    assert event.decoded == {"b": 1, "a": 2}
    event.value["c"] = 3
    assert decode_value(event.channel_bytes()) == {"b": 1, "a": 2, "c": 3}


def test_meta_and_origin_travel_in_headers() -> None:
    event = Event({"x": 1}, {"class": "error", "rate": 10}, origin=("flow.p.in", 0, 42))
    rebuilt = event_from_record(event.channel_bytes(), event.headers())
    assert rebuilt.decoded == {"x": 1}
    assert rebuilt.meta == {"class": "error", "rate": 10}
    assert rebuilt.origin == ("flow.p.in", 0, 42)


def test_plain_event_has_no_headers() -> None:
    assert Event({"x": 1}).headers() == []
