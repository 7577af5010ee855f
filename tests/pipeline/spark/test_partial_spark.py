"""Partial aggregation before the shuffle on a real Spark and SPU: the same pipeline and events with
folding on and off give the same outputs per group, the same err events, across micro-batches,
restarts from the checkpoint in the middle of windows, and a state export/import; and fewer events
cross the shuffle folded (the query's observed `SHUFFLE_METRIC`), after a prefix run per event and
after a columnar one alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.local import compile_query
from contraflow.pipeline.spark.listener import SHUFFLE_EVENTS, SHUFFLE_METRIC
from contraflow.pipeline.spark.query import FOLDED_STATE_PARTITIONS
from contraflow.pipeline.spark.state import export_state, import_state
from contraflow.spark.checkpoint import state_partitions
from contraflow.spu.client import SpuClient
from tests.pipeline.spark.harness import SparkPipeline
from tests.pipeline.spark.test_partial import EVENT_TIME, pipeline

# Event time from `ts`, grouped by a key of mixed types the prefix puts in the metadata.
GROUPED = pipeline(
    EVENT_TIME,
    """select {"k": group[0], "n": aggr::stats::count(), "hi": aggr::stats::max(event.v),
        "last": aggr::win::last(event.v)}
from tag[w] group by $k into out having event.n != 2;
""",
)
# One stream (max_groups), tilt frames: a window's output feeds the next one.
TILTED = pipeline(
    "define window w from tumbling with interval = 100, max_groups = 3 script event.ts end;\n"
    "define window pairs from tumbling with size = 2 end;\n",
    """select {"k": group[0], "w": window, "n": aggr::stats::count(), "lo": aggr::stats::min(event.v)}
from tag[w, pairs] group by $k into out;
""",
)
KEYS = ["a", "b", 1, 1.0, True, None, "c", ["x"]]


def counted(key: str) -> str:
    """Counts per string key: `key` is the group expression, which vectorizes (`event.k`) or does
    not (`[event.k][0]`, the same value): the prefix runs columnar or per event in Spark's workers."""
    return pipeline(
        EVENT_TIME,
        'select {"k": group[0], "n": aggr::stats::count()} from tag[w] group by $k into out;\n',
        key,
    )


def _events(start: int, count: int) -> list[bytes]:
    """Event times going back and forth within and across batches, a few failing events."""
    events = []
    for i in range(start, start + count):
        event = {
            "ts": (i * 37) % 90 + i * 4,
            "k": KEYS[(i * 7) % len(KEYS)],
            "v": (i * 13) % 17,
            "keep": i % 9 != 4,
        }
        if i % 23 == 5:
            event["ts"] = "late"  # the window script fails: an err event in its place
        if i % 31 == 7:
            event["v"] = "high"  # max's argument fails
        events.append(orjson.dumps(event))
    events[3] = b"{broken"
    return events


@pytest.fixture()
def pipelines(spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path) -> Iterator[Any]:
    started: list[SparkPipeline] = []

    def make(graph: PipelineGraph, partitions: int = 1) -> SparkPipeline:
        started.append(SparkPipeline(spark, spu, spu_addr, graph, tmp_path, {"in": partitions}))
        return started[-1]

    yield make
    for p in started:
        p.stop()


def _by_group(values: list[Any]) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = {}
    for value in values:
        groups.setdefault(orjson.dumps(value["k"]).decode(), []).append(value)
    return groups


def _run(p: SparkPipeline, fold: bool, batches: list[tuple[int, int, int]], events: Any = _events) -> int:
    """Feed (partition, start, count) batches, each then read by the query started afresh from
    its checkpoint with the available-now trigger (event-time windows register timers, so a
    running query would never be idle for `processAllAvailable`): every batch after the first
    is a restart, some in the middle of windows. Returns the events that crossed the shuffle."""
    crossed = 0
    for partition, start, count in batches:
        p.feed(*events(start, count), partition=partition)
        p.start(fold_partials=fold, trigger="availableNow")
        p.query.awaitTermination()
        assert p.query.exception() is None
        for progress in p.query.recentProgress:
            observed = progress.observedMetrics.get(SHUFFLE_METRIC)
            crossed += (observed[SHUFFLE_EVENTS] or 0) if observed is not None else 0
    return crossed


def _counted_events(start: int, count: int) -> list[bytes]:
    """One type per field (so the columns answer every row): times going back and forth, a few
    events dropped by `where`."""
    return [
        orjson.dumps({"ts": (i * 37) % 90 + i * 4, "k": "abc"[(i * 7) % 3], "keep": i % 9 != 4})
        for i in range(start, start + count)
    ]


def test_folded_and_per_event_queries_agree_per_group(pipelines: Any, spark: Any) -> None:
    """The folded query's state is laid out over FOLDED_STATE_PARTITIONS (its restarts keep it),
    the per-event one's over the session's shuffle partitions."""
    graph = compile_query(GROUPED)
    batches = [(0, 0, 60), (1, 60, 40), (0, 100, 50), (1, 150, 60)]
    per_event, folded = pipelines(graph, partitions=2), pipelines(graph, partitions=2)
    _run(per_event, False, batches)
    _run(folded, True, batches)
    session_partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert session_partitions != FOLDED_STATE_PARTITIONS
    assert state_partitions(per_event.checkpoint) == session_partitions
    assert state_partitions(folded.checkpoint) == FOLDED_STATE_PARTITIONS
    want = per_event.values()
    assert len(want) > 20
    assert _by_group(folded.values()) == _by_group(want)
    assert sorted(map(orjson.dumps, folded.values("err"))) == sorted(
        map(orjson.dumps, per_event.values("err"))
    )
    assert len(per_event.values("err")) >= 8


def test_tilt_frames_and_max_groups_agree_across_a_state_move(pipelines: Any, tmp_path: Path) -> None:
    """One stream (max_groups), so the whole order is kept: outputs identical, err events too;
    the folded query's state is exported mid-window and imported into a fresh one."""
    graph = compile_query(TILTED)
    per_event = pipelines(graph)
    _run(per_event, False, [(0, 0, 80), (0, 80, 80), (0, 160, 80)])
    folded = pipelines(graph)
    _run(folded, True, [(0, 0, 80), (0, 80, 80)])
    snapshot = export_state(folded.spark, folded.checkpoint)
    moved = pipelines(graph)
    moved.outputs = folded.outputs  # the fresh query continues into the same topics
    import_state(moved.checkpoint, orjson.loads(orjson.dumps(snapshot)))
    _run(moved, True, [(0, 160, 80)])
    assert folded.values() == per_event.values()
    assert folded.values("err") == per_event.values("err")
    assert any(v["w"] == "pairs" for v in per_event.values())


def test_folding_after_a_per_event_and_a_columnar_prefix(pipelines: Any) -> None:
    """The same counts with a prefix Spark's workers run per event and one they run columnar; both
    fold, the columnar one further (a group's later steps travel in its segment's row)."""
    batches = [(0, 0, 240)]
    runs = {}
    for name, key, fold in [
        ("per-event prefix", "[event.k][0]", True),
        ("columnar prefix", "event.k", True),
        ("unfolded", "event.k", False),
    ]:
        p = pipelines(compile_query(counted(key)))
        runs[name] = (_run(p, fold, batches, _counted_events), _by_group(p.values()))
    assert runs["per-event prefix"][1] == runs["columnar prefix"][1] == runs["unfolded"][1]
    assert sum(len(v) for v in runs["unfolded"][1].values()) > 10
    assert runs["columnar prefix"][0] < runs["per-event prefix"][0] < runs["unfolded"][0]
