"""Aggregate functions for windows: values, merging tilt frames, and state snapshots."""

from __future__ import annotations

import math
import statistics

import orjson
import pytest

from contraflow.lang.errors import ScriptRuntimeError
from contraflow.lang.script.aggr import AGGREGATES, Aggregate, lookup_aggregate

VALUES = [3, 1, 4, 1, 5, 9, 2, 6]


def _fed(name: str, values: list[int], *extra: object) -> Aggregate:
    cls = lookup_aggregate(name)
    assert cls is not None
    agg = cls()
    for v in values:
        agg.accumulate(v, *extra)
    return agg


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("aggr::stats::count", len(VALUES)),
        ("aggr::stats::sum", sum(VALUES)),
        ("aggr::stats::min", min(VALUES)),
        ("aggr::stats::max", max(VALUES)),
        ("aggr::stats::mean", statistics.mean(VALUES)),
        ("aggr::stats::var", statistics.variance(VALUES)),
        ("aggr::stats::stdev", statistics.stdev(VALUES)),
        ("aggr::win::first", VALUES[0]),
        ("aggr::win::last", VALUES[-1]),
        ("aggr::win::collect_flattened", VALUES),
    ],
)
def test_values(name: str, expected: object) -> None:
    got = _fed(name, VALUES).emit()
    if isinstance(expected, float):
        assert got == pytest.approx(expected)
    else:
        assert got == expected


@pytest.mark.parametrize("name", sorted(set(AGGREGATES) - {"aggr::win::collect_nested"}))
def test_merging_two_windows_equals_one_window_over_both(name: str) -> None:
    left, right = _fed(name, VALUES[:3]), _fed(name, VALUES[3:])
    left.merge(right)
    whole = _fed(name, VALUES).emit()
    merged = left.emit()
    if isinstance(whole, float):
        assert merged == pytest.approx(whole)
    elif name == "aggr::stats::hdr":
        assert merged["percentiles"] == whole["percentiles"] and merged["count"] == whole["count"]
    else:
        assert merged == whole


def test_collect_nested_keeps_each_merged_window_as_one_array() -> None:
    outer = _fed("aggr::win::collect_nested", [1])
    outer.merge(_fed("aggr::win::collect_nested", [2, 3]))
    assert outer.emit() == [1, [2, 3]]


def test_hdr_percentiles_are_nearest_rank() -> None:
    hdr = _fed("aggr::stats::hdr", list(range(1, 101)), ["0.5", "0.99", "1.0"]).emit()
    assert hdr["percentiles"] == {"0.5": 50, "0.99": 99, "1.0": 100}
    assert (hdr["count"], hdr["min"], hdr["max"], hdr["mean"]) == (100, 1, 100, 50.5)
    assert hdr["stdev"] == pytest.approx(math.sqrt(hdr["var"]))


def test_init_resets_and_snapshot_restores() -> None:
    agg = _fed("stats::sum", [1, 2])
    restored = type(agg).restore(agg.snapshot())
    restored.accumulate(3)
    assert restored.emit() == 6 and agg.emit() == 3
    agg.init()
    assert agg.emit() == 0


def test_empty_windows() -> None:
    assert _fed("aggr::stats::mean", []).emit() is None
    assert _fed("aggr::stats::min", []).emit() == 0.0  # Tremor: an f64 defaulting to 0.0
    assert _fed("aggr::stats::dds", []).emit()["percentiles"]["0.5"] == 0.0
    assert _fed("aggr::stats::count", []).emit() == 0


def test_non_numbers_are_runtime_errors() -> None:
    with pytest.raises(ScriptRuntimeError, match="aggr::stats::sum"):
        _fed("aggr::stats::sum", ["x"])  # type: ignore[list-item]


def test_unknown_aggregate() -> None:
    assert lookup_aggregate("aggr::stats::median") is None


def test_dds_survives_a_json_snapshot_and_merges() -> None:
    """The sketch's state is JSON (state stores), and merging two windows equals feeding one."""
    cls = lookup_aggregate("aggr::stats::dds")
    assert cls is not None
    first, second, whole = cls(), cls(), cls()
    for x in (3, 30, 300):
        first.accumulate(x)
        whole.accumulate(x)
    for x in (7, 70):
        second.accumulate(x)
        whole.accumulate(x)
    restored = cls.restore(orjson.loads(orjson.dumps(cls().snapshot())))
    restored.merge(cls.restore(orjson.loads(orjson.dumps(first.snapshot()))))
    restored.merge(second)
    assert restored.emit() == whole.emit()
    assert whole.emit()["min"] == 3.0 and whole.emit()["max"] == 300.0
