"""Helpers and hypothesis strategies shared by the codec tests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from contraflow.codecs import FrameErrors
from contraflow.codecs.processors.chain import Chain

RELAXED = settings(deadline=None)
"""For property tests: the cores are shared, so a per-example time limit would only add flakiness."""

MODEST = settings(deadline=None, max_examples=40)
"""RELAXED with fewer examples, for the many format properties that share the suite's time budget."""

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
TEXT = st.text(max_size=20)

SCALARS = st.none() | st.booleans() | I64 | FLOATS | TEXT


INFLUX_EXAMPLE = {
    "measurement": "weather",
    "tags": {"location": "us-midwest"},
    "fields": {"temperature": 82.0},
    "timestamp": 1465839830100400200,
}

EXAMPLE_VALUES: dict[str, Any] = {
    "json": {"k": [1, 2.5]},
    "json-sorted": {"k": [1, 2.5], "a": None},
    "msgpack": {"k": [1, 2.5]},
    "yaml": {"k": [1, 2.5]},
    "tremor": {"k": [1, 2.5, b"raw"]},
    "csv": ["a", "b"],
    "string": "text",
    "binary": b"raw",
    "null": None,
    "influx": INFLUX_EXAMPLE,
    "binflux": INFLUX_EXAMPLE,
    "statsd": {"type": "c", "metric": "sam", "value": 7, "sample_rate": 0.1},
    "dogstatsd": {
        "metric": {
            "type": "c",
            "metric": "datadog.metric",
            "values": [7.0],
            "sample_rate": 0.1,
            "tags": ["example_tag:example_value"],
        }
    },
    "syslog": {
        "severity": "notice",
        "facility": "local4",
        "msg": "test message",
        "protocol": "RFC5424",
        "protocol_version": 1,
        "timestamp": 0,
    },
}
"""One value per codec, from Tremor's codec reference, that survives encode -> decode."""


def values(scalars: st.SearchStrategy[Any] = SCALARS) -> st.SearchStrategy[Any]:
    """JSON-shaped values: nested lists and string-keyed dicts of `scalars`."""
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
        max_leaves=12,
    )


def assert_same(left: Any, right: Any) -> None:
    """Equal *and* of the same types all the way down (1 == 1.0 == True would hide bugs)."""
    assert type(left) is type(right), (left, right)
    if isinstance(left, dict):
        assert list(left) == list(right)
        for key in left:
            assert_same(left[key], right[key])
    elif isinstance(left, list):
        assert len(left) == len(right)
        for a, b in zip(left, right, strict=True):
            assert_same(a, b)
    else:
        assert left == right


def run(chain: Chain, chunks: Iterable[bytes], finish: bool = True) -> tuple[list[bytes], list[str]]:
    """Feed `chunks` then finish (unless told not to); the frames out and the error messages, in order."""
    frames: list[bytes] = []
    errors: list[str] = []
    for chunk in [*chunks, None] if finish else chunks:
        try:
            frames.extend(chain.finish() if chunk is None else chain.process(chunk))
        except FrameErrors as err:
            frames.extend(err.frames)
            errors.extend(str(e) for e in err.errors)
    return frames, errors


def split_at(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    """`data` cut at the given offsets (any order, duplicates allowed: empty chunks happen too)."""
    points = sorted(min(max(cut, 0), len(data)) for cut in cuts)
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
