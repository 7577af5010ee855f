"""influx, binflux, statsd and dogstatsd: the examples of Tremor's codec reference, byte for byte, and
decode(encode(v)) == v for every value each format can hold."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from codecs_support import INFLUX_EXAMPLE, MODEST, assert_same
from hypothesis import given
from hypothesis import strategies as st

from contraflow.codecs import NO_EVENT, codec

# Tremor's influx cases (tremor-codec influx.rs): line -> value, and the line it writes back.
INFLUX_CASES = [
    (
        rb"weather,location=us\,midwest temperature=82 1465839830100400200",
        {"measurement": "weather", "tags": {"location": "us,midwest"}, "fields": {"temperature": 82.0}},
    ),
    (
        rb"weather,location_place=us-midwest temp\=erature=82 1465839830100400200",
        {
            "measurement": "weather",
            "tags": {"location_place": "us-midwest"},
            "fields": {"temp=erature": 82.0},
        },
    ),
    (
        rb"weather,location\ place=us-midwest temperature=82 1465839830100400200",
        {"measurement": "weather", "tags": {"location place": "us-midwest"}, "fields": {"temperature": 82.0}},
    ),
    (
        rb"wea\ ther,location=us-midwest temperature=82 1465839830100400200",
        {"measurement": "wea ther", "tags": {"location": "us-midwest"}, "fields": {"temperature": 82.0}},
    ),
    (
        rb'weather,location=us-midwest temperature_str="too\ hot\cold" 1465839830100400200',
        {
            "measurement": "weather",
            "tags": {"location": "us-midwest"},
            "fields": {"temperature_str": r"too\ hot\cold"},
        },
    ),
    (
        rb'weather,location=us-midwest temperature_str="too hot\\\\\\cold" 1465839830100400200',
        {
            "measurement": "weather",
            "tags": {"location": "us-midwest"},
            "fields": {"temperature_str": r"too hot\\\cold"},
        },
    ),
    (
        b"weather,location=us-midwest temperature=82,bug_concentration=98 1465839830100400200",
        {
            "measurement": "weather",
            "tags": {"location": "us-midwest"},
            "fields": {"temperature": 82.0, "bug_concentration": 98.0},
        },
    ),
    (
        b"weather,location=us-midwest temperature=82i 1465839830100400200",
        {"measurement": "weather", "tags": {"location": "us-midwest"}, "fields": {"temperature": 82}},
    ),
]

LIVE_LINE = (
    b"kafka_BrokerTopicMetrics,agent=jmxtrans,dc=iad1,host_name=kafka-iad1-g4-1,junk=kafka_topic,"
    b"kafka_type=server,metric_type=counter,topic_name=customerEmailServiceMessage BytesInPerSec=0i,"
    b"BytesOutPerSec=0i,FailedFetchRequestsPerSec=0i,FetchMessageConversionsPerSec=0i,"
    b"TotalFetchRequestsPerSec=1993153i 1562179275506000000"
)


@pytest.mark.parametrize(("line", "record"), INFLUX_CASES)
def test_influx_reads_tremors_cases_and_binflux_carries_them(line: bytes, record: dict[str, Any]) -> None:
    expected = {**record, "timestamp": 1465839830100400200}
    influx, binflux = codec("influx"), codec("binflux")
    assert_same(influx.decode(line), expected)
    assert_same(influx.decode(influx.encode(expected)), _sorted(expected))
    assert_same(binflux.decode(binflux.encode(expected)), expected)


def test_influx_writes_tremors_lines() -> None:
    influx = codec("influx")
    assert (
        influx.encode(INFLUX_EXAMPLE) == b"weather,location=us-midwest temperature=82.0 1465839830100400200"
    )
    assert influx.encode(influx.decode(LIVE_LINE)) == LIVE_LINE  # tags and fields come out sorted
    mixed = {
        "measurement": r"wea,\ ther",
        "tags": {},
        "fields": {"temp=erature": 82.0, 'too\\ \\\\\\"hot"': True},
        "timestamp": 1465839830100400200,
    }
    line = rb"wea\,\\\ ther temp\=erature=82.0,too\\\ \\\\\\\"hot\"=true 1465839830100400200"
    assert influx.encode(mixed) == line
    assert influx.decode(line) == mixed  # Tremor cannot read this one back; we can


def test_influx_comments_and_blank_lines_carry_no_event_and_a_missing_timestamp_is_now() -> None:
    influx = codec("influx")
    assert influx.decode(b"# a comment") is NO_EVENT and influx.decode(b"  \n") is NO_EVENT
    before = time.time_ns()
    assert influx.decode(b"m v=1")["timestamp"] >= before


NAME = st.text(
    st.characters(codec="utf-8", categories=["L", "N", "P", "S"]) | st.sampled_from(' ,="\\'),
    min_size=1,
    max_size=12,
)
FIELD = (
    st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc", "Zl", "Zp"]), max_size=12)
)
INFLUX_RECORDS = st.fixed_dictionaries(
    {
        "measurement": NAME.filter(lambda name: not name.startswith("#")),
        "tags": st.dictionaries(NAME, NAME, max_size=3),
        "fields": st.dictionaries(NAME, FIELD, min_size=1, max_size=4),
        "timestamp": st.integers(min_value=0, max_value=2**64 - 1),
    }
)


@MODEST
@given(INFLUX_RECORDS)
def test_influx_round_trips_every_record_it_can_write(record: dict[str, Any]) -> None:
    influx = codec("influx")
    assert_same(influx.decode(influx.encode(record)), _sorted(record))


@MODEST
@given(INFLUX_RECORDS)
def test_binflux_round_trips_every_influx_record(record: dict[str, Any]) -> None:
    binflux = codec("binflux")
    assert_same(binflux.decode(binflux.encode(record)), _in_order(record, sort=False))


def _sorted(record: dict[str, Any]) -> dict[str, Any]:
    """The line protocol writes tags and fields sorted, so they read back in that order."""
    return _in_order(record, sort=True)


def _in_order(record: dict[str, Any], sort: bool) -> dict[str, Any]:
    """`record` with its keys in the order decoding makes them (and tags and fields sorted if `sort`)."""
    tags, fields = record["tags"], record["fields"]
    return {
        "measurement": record["measurement"],
        "tags": dict(sorted(tags.items())) if sort else tags,
        "fields": dict(sorted(fields.items())) if sort else fields,
        "timestamp": record["timestamp"],
    }


def test_binflux_writes_tremors_layout() -> None:
    value = {"measurement": "m", "tags": {"t": "v"}, "fields": {"i": -1, "b": True}, "timestamp": 42}
    frame = codec("binflux").encode(value)
    assert frame == (
        b"\x00\x00" + b"\x00\x01m" + (42).to_bytes(8, "big") + b"\x00\x01" + b"\x00\x01t\x00\x01v"
        b"\x00\x02" + b"\x00\x01i\x00" + (-1).to_bytes(8, "big", signed=True) + b"\x00\x01b\x03"
    )


# Tremor's statsd cases (tremor-codec statsd.rs): line <-> value, exactly.
STATSD_CASES = [
    (b"gorets:1|c", {"type": "c", "metric": "gorets", "value": 1}),
    (b"glork:320|ms", {"type": "ms", "metric": "glork", "value": 320}),
    (b"gaugor:333|g", {"type": "g", "metric": "gaugor", "value": 333}),
    (b"uniques:765|s", {"type": "s", "metric": "uniques", "value": 765}),
    (b"horst:42.23|h", {"type": "h", "metric": "horst", "value": 42.23}),
    (b"sam:7|c|@0.1", {"type": "c", "metric": "sam", "value": 7, "sample_rate": 0.1}),
    (b"addy:+123|g", {"type": "g", "metric": "addy", "action": "add", "value": 123}),
    (b"subastian:-234|g", {"type": "g", "metric": "subastian", "action": "sub", "value": 234}),
    (b"foo:1620649445.3351967|h", {"type": "h", "metric": "foo", "value": 1620649445.3351967}),
    (b"foo2:1234567890|c", {"type": "c", "metric": "foo2", "value": 1234567890}),
]


@pytest.mark.parametrize(("line", "value"), STATSD_CASES)
def test_statsd_reads_and_writes_tremors_cases(line: bytes, value: dict[str, Any]) -> None:
    statsd = codec("statsd")
    decoded = statsd.decode(line)
    assert decoded == value and type(decoded["value"]) is type(value["value"])
    assert statsd.encode(decoded) == line


METRIC_NAME = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters=":"), max_size=12
)
RATE = st.floats(min_value=0, max_value=1)
STATSD_VALUES = st.one_of(
    st.fixed_dictionaries(
        {
            "metric": METRIC_NAME,
            "type": st.sampled_from(["c", "ms", "h", "s"]),
            "value": st.integers(min_value=-(2**63), max_value=2**64 - 1)
            | st.floats(allow_nan=False, allow_infinity=False),
        },
        optional={"sample_rate": RATE},
    ),
    st.fixed_dictionaries(
        {
            "metric": METRIC_NAME,
            "type": st.just("g"),
            "value": st.integers(min_value=0, max_value=2**63 - 1)
            | st.floats(min_value=0, allow_infinity=False).filter(lambda x: math.copysign(1, x) > 0),
        },
        optional={"action": st.sampled_from(["add", "sub"]), "sample_rate": RATE},
    ),
)


@MODEST
@given(STATSD_VALUES)
def test_statsd_round_trips_every_metric_it_can_write(value: dict[str, Any]) -> None:
    statsd = codec("statsd")
    decoded = statsd.decode(statsd.encode(value))
    assert decoded == value and type(decoded["value"]) is type(value["value"])


# The examples of Tremor's dogstatsd reference and tests.
DOGSTATSD_CASES = [
    (
        b"datadog.metric:7|c|@0.1|#example_tag:example_value",
        {
            "metric": {
                "metric": "datadog.metric",
                "values": [7.0],
                "type": "c",
                "sample_rate": 0.1,
                "tags": ["example_tag:example_value"],
            }
        },
    ),
    (
        b"dog:111:222:333:4.44|g|@0.5|#foo:bar,fizz:buzz|c:123abc",
        {
            "metric": {
                "metric": "dog",
                "values": [111.0, 222.0, 333.0, 4.44],
                "type": "g",
                "sample_rate": 0.5,
                "tags": ["foo:bar", "fizz:buzz"],
                "container_id": "123abc",
            }
        },
    ),
    (
        b"_e{21,36}:An exception occurred|Cannot parse CSV file from 10.0.0.17",
        {"event": {"title": "An exception occurred", "text": "Cannot parse CSV file from 10.0.0.17"}},
    ),
    (
        b"_e{5,4}:title|text|d:1663016695|h:host|k:agg|p:low|s:src|t:warning|#a:b,c|c:cid",
        {
            "event": {
                "title": "title",
                "text": "text",
                "timestamp": 1663016695,
                "hostname": "host",
                "aggregation_key": "agg",
                "priority": "low",
                "source": "src",
                "type": "warning",
                "tags": ["a:b", "c"],
                "container_id": "cid",
            }
        },
    ),
    (
        b"_sc|Redis connection|2|#env:dev|m:Redis connection timed out after 10s",
        {
            "service_check": {
                "name": "Redis connection",
                "status": 2,
                "tags": ["env:dev"],
                "message": "Redis connection timed out after 10s",
            }
        },
    ),
]


@pytest.mark.parametrize(("line", "value"), DOGSTATSD_CASES)
def test_dogstatsd_reads_and_writes_tremors_examples(line: bytes, value: dict[str, Any]) -> None:
    dogstatsd = codec("dogstatsd")
    assert_same(dogstatsd.decode(line), value)
    assert dogstatsd.encode(value) == line


def test_dogstatsd_event_lengths_are_utf8_bytes_and_titles_may_hold_bars() -> None:
    dogstatsd = codec("dogstatsd")
    value = {"event": {"title": "a|b ✓", "text": "über"}}
    line = dogstatsd.encode(value)
    assert line.startswith("_e{7,5}:a|b ✓|über".encode())
    assert dogstatsd.decode(line) == value


UTF8_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
FREE_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="|"), max_size=12
)
TAGS = st.lists(
    st.text(
        st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="|,"),
        min_size=1,
        max_size=8,
    ),
    min_size=1,
    max_size=3,
)
STAMP = st.integers(min_value=0, max_value=2**32 - 1)
DOGSTATSD_VALUES = st.one_of(
    st.fixed_dictionaries(
        {
            "metric": METRIC_NAME.filter(lambda n: not n.startswith(("_e{", "_sc|"))).filter(
                lambda n: "|" not in n
            ),
            "values": st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=3),
            "type": st.sampled_from(["c", "d", "g", "h", "s", "ms"]),
        },
        optional={"sample_rate": RATE, "tags": TAGS, "container_id": FREE_TEXT},
    ).map(lambda metric: {"metric": metric}),
    st.fixed_dictionaries(
        {"title": UTF8_TEXT, "text": UTF8_TEXT},
        optional={
            "timestamp": STAMP,
            **{
                key: FREE_TEXT
                for key in ("hostname", "aggregation_key", "priority", "source", "type", "container_id")
            },
            "tags": TAGS,
        },
    ).map(lambda event: {"event": event}),
    st.fixed_dictionaries(
        {"name": FREE_TEXT, "status": st.integers(min_value=0, max_value=3)},
        optional={
            "timestamp": STAMP,
            "hostname": FREE_TEXT,
            "tags": TAGS,
            "message": FREE_TEXT,
            "container_id": FREE_TEXT,
        },
    ).map(lambda check: {"service_check": check}),
)


@MODEST
@given(DOGSTATSD_VALUES)
def test_dogstatsd_round_trips_every_datagram_it_can_write(value: dict[str, Any]) -> None:
    dogstatsd = codec("dogstatsd")
    assert dogstatsd.decode(dogstatsd.encode(value)) == value
