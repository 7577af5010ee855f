"""Pipelines as Spark streaming queries on a real local Spark, between real SPU topics."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from contraflow.errors import UserError
from contraflow.events import META_HEADER, Event
from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.analysis import has_timers
from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.local import compile_query, finish
from contraflow.pipeline.spark import query as query_module
from contraflow.pipeline.spark.listener import LATE_METRIC
from contraflow.pipeline.spark.local import fire_pending
from contraflow.pipeline.spark.query import start_pipeline
from contraflow.pipeline.spark.state import export_state, import_state
from contraflow.pipeline.spark.time_mode import query_has_timers
from contraflow.spu.api import read_topic
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol.topics import TopicConfig
from tests.pipeline.spark.harness import RFC_COUNTER

_names = itertools.count()


class Pipeline:
    """A compiled pipeline with its own input and output topics, started as a Spark query."""

    def __init__(
        self, spark: Any, spu: SpuClient, addr: str, text: str, workdir: Path, *, input_partitions: int = 1
    ) -> None:
        self.spark, self.spu, self.addr = spark, spu, addr
        self.graph: PipelineGraph = compile_query(text)
        self.prefix = f"p{next(_names)}"
        self.input = f"{self.prefix}.in"
        self.outputs = {port: f"{self.prefix}.{port}" for port in self.graph.outputs}
        spu.create_topic(self.input, TopicConfig(partitions=input_partitions))
        for topic in self.outputs.values():
            spu.create_topic(topic)
        self.checkpoint = str(workdir / f"{self.prefix}-checkpoint")
        self.query: Any = None

    def start(self, checkpoint: str | None = None, **options: Any) -> Pipeline:
        self.query = start_pipeline(
            self.spark,
            self.graph,
            spu=self.addr,
            inputs={"in": self.input},
            outputs=self.outputs,
            checkpoint=checkpoint or self.checkpoint,
            name=self.prefix,
            consumer=f"{self.prefix}.consumer",
            **options,
        )
        return self

    def feed(self, *events: Any, partition: int = 0, headers: list[tuple[str, bytes]] | None = None) -> None:
        values = [e if isinstance(e, bytes) else orjson.dumps(e) for e in events]
        self.spu.produce(self.input, partition, values, headers=[headers] * len(values) if headers else None)

    def drain(self) -> None:
        self.query.processAllAvailable()
        assert self.query.exception() is None

    def stop(self) -> None:
        self.query.stop()

    def records(self, port: str) -> list[Any]:
        return read_topic(self.spu, self.outputs[port])

    def values(self, port: str = "out") -> list[Any]:
        return [orjson.loads(r.value) for r in self.records(port)]


@pytest.fixture()
def pipeline(spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path) -> Iterator[Any]:
    started: list[Pipeline] = []

    def make(text: str, **kwargs: Any) -> Pipeline:
        started.append(Pipeline(spark, spu, spu_addr, text, tmp_path, **kwargs))
        return started[-1]

    yield make
    for p in started:
        if p.query is not None and p.query.isActive:
            p.query.stop()


def test_passthrough_keeps_the_original_bytes_and_metadata(pipeline) -> None:
    p = pipeline("select event from in into out;").start()
    raw = [b'{ "a" :  1 }', b'[1,   2.50, "x"]', b'"text"']
    p.feed(*raw, headers=[(META_HEADER, b'{"source":"test"}')])
    p.drain()
    records = p.records("out")
    assert [r.value for r in records] == raw
    assert all(dict(r.headers)[META_HEADER] == b'{"source":"test"}' for r in records)
    p.stop()


def test_passthrough_to_a_single_topic_without_headers(pipeline) -> None:
    p = pipeline("select event from in into out;")
    p.outputs = {"out": p.outputs["out"]}  # err not wired: every row goes to the sink's one topic
    p.start()
    p.feed(b'{"b": [true,  null]}', b"2")
    p.drain()
    assert [(r.value, r.headers) for r in p.records("out")] == [(b'{"b": [true,  null]}', []), (b"2", [])]
    p.stop()


def test_select_where_then_script_errors_on_err(pipeline) -> None:
    p = pipeline(
        """
        define script double script {"a": event.a, "double": event.a * 2} end;
        create script double;
        select event from in where event.a != 1 into double;
        select event from double into out;
        """
    ).start()
    p.feed({"a": 1}, {"a": 2}, b"not json", {"a": "x"}, {"a": 3})
    p.drain()
    assert p.values("out") == [{"a": 2, "double": 4}, {"a": 3, "double": 6}]
    errors = p.values("err")
    assert [e["event"] for e in errors] == ["not json", {"a": "x"}]
    assert errors[1]["node"] == "double" and all(e["error"] for e in errors)
    # Tremor's err shape through Spark: the message, then the source line with a caret under it
    rendered = errors[1]["error"].splitlines()
    assert rendered[0].endswith("cannot apply '*' to string and integer") and set(rendered[2].strip()) == {
        "^"
    }
    p.feed({"a": 5})  # the query survived the bad events
    p.drain()
    assert p.values("out")[-1] == {"a": 5, "double": 10}
    p.stop()


def test_counter_script_counts_across_batches_and_restarts(pipeline) -> None:
    p = pipeline(RFC_COUNTER).start()
    p.feed({"n": 1}, {"n": 2})
    p.drain()
    p.feed({"n": 3})
    p.drain()
    p.stop()
    p.start()
    p.feed({"n": 4}, {"n": 5})
    p.drain()
    assert [(v["count"], v["event"]["n"]) for v in p.values()] == [(i, i) for i in range(1, 6)]
    p.stop()


def test_state_export_while_running_and_import_into_a_fresh_pipeline(pipeline, tmp_path: Path) -> None:
    window = """
    define window by_three from tumbling with size = 3 end;
    select aggr::win::collect_flattened(event.n) from in[by_three] into out;
    """
    first = pipeline(RFC_COUNTER + window).start()
    first.feed(*[{"n": i} for i in range(1, 6)])
    first.drain()
    snapshot = export_state(first.spark, first.checkpoint)  # the query is still running
    first.stop()
    assert snapshot["keys"][""]["counter"] == 5
    # a different "runtime": its own topics and checkpoint directory
    second = pipeline(RFC_COUNTER + window)
    fresh = str(tmp_path / "elsewhere" / "checkpoints" / "flow" / "pipeline")
    import_state(fresh, orjson.loads(orjson.dumps(snapshot)))
    second.start(checkpoint=fresh)
    second.feed({"n": 6}, {"n": 7})
    second.drain()
    outputs = second.values()
    assert [v["count"] for v in outputs if isinstance(v, dict)] == [6, 7]
    assert [4, 5, 6] in outputs  # the window opened before the move closed with all its events
    second.stop()


def test_stateful_pipeline_sees_each_partition_in_offset_order(pipeline) -> None:
    p = pipeline(RFC_COUNTER, input_partitions=2).start()
    for start in range(0, 60, 20):
        for partition in (0, 1):
            p.feed(*[{"p": partition, "i": i} for i in range(start, start + 20)], partition=partition)
    p.drain()
    outputs = p.values()
    assert [v["count"] for v in outputs] == list(range(1, 121))
    for partition in (0, 1):
        seen = [v["event"]["i"] for v in outputs if v["event"]["p"] == partition]
        assert seen == list(range(60))
    p.stop()


def test_count_window_groups(pipeline) -> None:
    p = pipeline(
        """
        define window pairs from tumbling with size = 2 end;
        select {"key": group[0], "sum": aggr::stats::sum(event.v)} from in[pairs]
        group by event.k into out;
        """
    ).start()
    p.feed({"k": "a", "v": 1}, {"k": "b", "v": 10}, {"k": "a", "v": 2})
    p.drain()
    assert p.values() == [{"key": "a", "sum": 3}]
    p.feed({"k": "b", "v": 20})
    p.drain()
    assert p.values()[-1] == {"key": "b", "sum": 30}
    p.stop()


def test_interval_window_closes_on_the_timer_without_more_input(pipeline) -> None:
    p = pipeline(
        """
        define window second from tumbling with interval = 1000000000 end;
        select aggr::stats::count() from in[second] into out;
        """
    ).start(trigger="200 milliseconds")
    p.feed({"a": 1}, {"a": 2})
    deadline = time.monotonic() + 30
    while not p.values() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert p.values() == [2]
    p.stop()


# A window whose time is the event's own (`script event.t`): only events close it, never ticks.
EVENT_TIME_WINDOW = """
define window ten from tumbling with interval = 10 script event.t end;
select {"key": group[0], "count": aggr::stats::count()} from in[ten] group by event.k into out;
"""


def test_only_windows_that_follow_ingest_time_need_timers() -> None:
    def timed(windows: str, source: str = "in[a, b]") -> bool:
        return has_timers(compile_query(f"{windows}select aggr::stats::count() from {source} into out;"))

    interval, scripted = "with interval = 10 end;\n", "with interval = 10 script event.t end;\n"
    assert timed(f"define window a from tumbling {interval}define window b from tumbling {interval}")
    assert not has_timers(compile_query(EVENT_TIME_WINDOW))
    # tilt frames close with the first window: an ingest-time second window is never ticked alone
    assert not timed(f"define window a from tumbling {scripted}define window b from tumbling {interval}")
    executor = PipelineExecutor(compile_query(EVENT_TIME_WINDOW))
    executor.process("in", Event.from_raw(b'{"k": "a", "t": 5}'), 0)
    assert executor.next_deadline_ns() is None and executor.tick(10**18) == []


def test_a_checkpoint_keeps_the_time_mode_it_was_made_in(tmp_path: Path) -> None:
    """Spark resumes a checkpoint only in its own time mode ("Cannot change timeMode"): one that
    planned a batch before the event-time window stopped counting as timed keeps its timers; a new
    one runs without; the choice is marked beside the checkpoint and read back, not made again."""
    graph = compile_query(EVENT_TIME_WINDOW)
    old, new = tmp_path / "old", tmp_path / "new"
    (old / "offsets").mkdir(parents=True)
    (old / "offsets" / "0").write_text("v1\n")  # what a query writes when it plans batch 0
    assert query_has_timers(old, graph)
    assert not query_has_timers(new, graph)
    (new / "offsets").mkdir(parents=True)
    (new / "offsets" / "0").write_text("v1\n")  # the new query has run since: its mark decides
    assert query_has_timers(old, graph) and not query_has_timers(new, graph)


def test_available_now_run_of_a_timed_pipeline_ends_with_the_local_runners_windows(
    pipeline, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ingest-time interval window with the available-now trigger: the run ends by itself once
    its backlog is read (in several micro-batches), and its output plus the windows left open,
    fired from the exported state, are what the executor gives over the same ingest times."""
    monkeypatch.setattr(query_module, "RAMP_RECORDS", 500)  # a first batch of 500, then doubling
    p = pipeline(
        """
        define window tenth from tumbling with interval = 100000000 end;
        select {"key": group[0], "count": aggr::stats::count()} from in[tenth] group by event.key into out;
        """
    )
    events = [orjson.dumps({"key": f"k{i % 5}", "i": i}) for i in range(3000)]
    start_ms = time.time_ns() // 1_000_000 - 600_000  # long past: a due timer would fire at once
    stamps = [start_ms + i for i in range(len(events))]  # 1 ms apart: 30 windows per key
    for first in range(0, len(events), 500):
        p.spu.produce(p.input, 0, events[first : first + 500], timestamps=stamps[first : first + 500])
    p.start(trigger="availableNow")
    assert p.query.awaitTermination(600), "the available-now run did not end"
    assert p.query.exception() is None
    assert len([b for b in p.query.recentProgress if b.numInputRows]) >= 3
    pending = fire_pending(p.graph, export_state(spark, p.checkpoint))
    got = p.values() + [orjson.loads(v) for v in pending.get("out", [])]
    executor = PipelineExecutor(p.graph)
    want = [
        event.decoded
        for value, stamp in zip(events, stamps, strict=True)
        for port, event in executor.process("in", Event.from_raw(value), stamp * 1_000_000)
        if port == "out"
    ]
    want += [event.decoded for port, event in finish(executor) if port == "out"]

    def by_key(rows: list[Any]) -> dict[str, list[int]]:
        grouped: dict[str, list[int]] = {}
        for row in rows:
            grouped.setdefault(row["key"], []).append(row["count"])
        return grouped

    assert by_key(got) == by_key(want)
    assert sum(row["count"] for row in got) == len(events) and len(got) > 100


def test_split_group_keyed_pipeline_matches_the_executor(pipeline) -> None:
    """Parse, filter and enrich run before the state, the windows of each group in its own stream:
    every group gets the windows the one-stream executor gives it, in the same order."""
    text = """
    define script enrich
    script
      let event.tier = match event.amount > 5 of case true => "high" default => "low" end;
      event
    end;
    create script enrich;
    define window pairs from tumbling with size = 2 end;
    select event from in where event.level == "error" into enrich;
    select {"key": group[0], "tiers": aggr::win::collect_flattened(event.tier)} from enrich[pairs]
    group by event.key into out;
    """
    p = pipeline(text, input_partitions=2)
    events = [
        orjson.dumps({"level": "error" if i % 4 else "info", "key": f"k{i % 5}", "amount": i % 11})
        for i in range(80)
    ]
    events[9] = b"{broken"
    p.start()
    p.feed(*events[:40], partition=0)
    p.feed(*events[40:], partition=1)
    p.drain()
    expected = PipelineExecutor(p.graph)
    want: dict[str, list[Any]] = {"out": [], "err": []}
    for part in (events[:40], events[40:]):
        for port, (out, _) in expected.process_values("in", part, None, 0).items():
            want[port] += [orjson.loads(v) for v in out]
    got = p.values()

    def by_key(rows: list[Any]) -> dict[str, list[Any]]:
        grouped: dict[str, list[Any]] = {}
        for row in rows:
            grouped.setdefault(row["key"], []).append(row["tiers"])
        return grouped

    assert by_key(got) == by_key(want["out"]) and len(got) == len(want["out"]) > 10
    assert [e["event"] for e in p.values("err")] == [e["event"] for e in want["err"]] == ["{broken"]
    p.stop()


def test_late_tolerant_window_runs_per_event_on_spark_across_a_restart(pipeline) -> None:
    """A select the fold would take but for its `lateness` (a count, behind a stateless prefix):
    Spark gives the executor's windows and late errors, in order, with the watermark and windows
    continued across a restart, and observes each batch's late events per node. Late events come
    right after a later event of their group in one produce (one ingest time): the fold would
    put them in that event's segment, so they would be counted instead of reported."""
    text = """
    define window tens from tumbling with interval = 10, lateness = 5 script event.ts end;
    select event from in where event.level == "error" into tagged;
    create stream tagged;
    select {"key": group[0], "n": aggr::stats::count()} from tagged[tens]
    group by event.key into out;
    """
    batches = [
        [("a", 1), ("b", 12), ("a", 8), ("a", 3), ("b", 16), ("a", 3)],
        [("a", 25), ("a", 14), ("b", 22), ("b", 31), ("b", 19)],
        [("a", 44), ("a", 40), ("a", 29), ("b", 52), ("b", 9), ("a", 61)],
    ]
    events = [
        [
            orjson.dumps({"level": "info" if (i, j) == (0, 5) else "error", "key": key, "ts": ts})
            for j, (key, ts) in enumerate(batch)
        ]
        for i, batch in enumerate(batches)
    ]
    p = pipeline(text).start()
    late = 0
    for number, batch in enumerate(events):
        if number == 2:  # the third batch after a restart
            late += _observed_late(p.query, "select_2")
            p.stop()
            p.start()
        p.feed(*batch)
        p.drain()
    late += _observed_late(p.query, "select_2")
    executor = PipelineExecutor(p.graph)
    want: dict[str, list[Any]] = {"out": [], "err": []}
    for value in (value for batch in events for value in batch):
        for port, event in executor.process("in", Event.from_raw(value), 0):
            want[port].append(event.decoded)
    assert p.values("out") == want["out"] and len(want["out"]) >= 6
    assert p.values("err") == want["err"] and [e["late"] for e in want["err"]] == [True] * 4
    assert late == 4
    p.stop()


def test_a_partition_read_behind_another_makes_no_event_late(pipeline) -> None:
    """Two input partitions whose event times are 25 apart, read in two rounds (two micro-batches
    at least, the second with the partition ahead first): partition 1's events run ahead,
    partition 0's trail. The watermark follows the slower partition, so nothing is late: the join
    gives exactly the pairs an offline join of all the events gives, and each window emitted holds
    exactly its events (with one watermark over all partitions, as before, partition 0's second
    round was late, for the join and for the window)."""
    text = """
    define window tens from tumbling with interval = 10, lateness = 2 script event.ts end;
    create stream lefts;
    create stream rights;
    select event from in where event.side == "L" into lefts;
    select event from in where event.side == "R" into rights;
    select {"l": left.id, "r": right.id} from lefts with time = event.ts
    join rights with time = event.ts on left.k == right.k within 3 into out;
    select {"ids": aggr::win::collect_flattened(event.id)} from in[tens] into out;
    """
    p = pipeline(text, input_partitions=2).start()
    events = []
    highs: dict[int, int] = {}
    for round_ in range(2):
        fed: list[tuple[int, list[dict[str, Any]]]] = []
        for partition, first_ts in ((0, 20 * round_), (1, 20 * round_ + 25)):
            batch = [
                {"id": len(events) + i, "side": "LR"[i % 2], "k": i // 2 % 2, "ts": first_ts + i}
                for i in range(20)
            ]
            fed.append((partition, batch))
            events += batch
            highs[partition] = batch[-1]["ts"]
        for partition, batch in fed if round_ == 0 else reversed(fed):  # ahead first, after round 0
            p.feed(*batch, partition=partition)
        p.drain()
    pairs = {
        (left["id"], right["id"])
        for left in events
        for right in events
        if left["side"] == "L" and right["side"] == "R"
        if left["k"] == right["k"] and abs(left["ts"] - right["ts"]) <= 3
    }
    out = p.values()
    assert p.values("err") == []
    assert sorted((v["l"], v["r"]) for v in out if "l" in v) == sorted(pairs) and len(pairs) > 40
    watermark = min(highs.values()) - 2  # the slower partition's highest time - lateness
    windows = [
        sorted(e["id"] for e in events if start <= e["ts"] < start + 10)
        for start in range(0, watermark - 9, 10)
    ]
    assert [sorted(v["ids"]) for v in out if "ids" in v] == windows and len(windows) == 3
    p.stop()


def _observed_late(query: Any, node: str) -> int:
    """The late events of `node` the query's batches observed (`LATE_METRIC`), this run."""
    counts = [progress.observedMetrics.get(LATE_METRIC) for progress in query.recentProgress]
    return sum(row[node] or 0 for row in counts if row is not None)


def test_partition_by_cannot_split_a_join_s_watermark(pipeline) -> None:
    """A join runs as one stream: split by `partition_by`, each part would have its own watermark."""
    p = pipeline(
        """
        create stream orders;
        create stream payments;
        select event from in where present event.id into orders;
        select event from in where present event.order_id into payments;
        select {"order": left, "payment": right} from orders left join payments
        on left.id == right.order_id within 10 into out;
        """
    )
    with pytest.raises(UserError, match="select_3 follow one watermark over all its events"):
        p.start(partition_by="event.id")
