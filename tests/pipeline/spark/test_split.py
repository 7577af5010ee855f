"""Splitting stateful pipelines (stateless prefix | stateful rest) and keying them by group."""

from __future__ import annotations

from itertools import groupby
from typing import Any

import orjson
import pytest

from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.spark.keying import (
    GROUP_STREAMS,
    GroupStreams,
    independent_groups,
    stream_keys,
    stream_number,
)
from contraflow.pipeline.spark.split import split_prefix
from tests.pipeline.spark.harness import RFC_COUNTER

ENRICH_THEN_COUNT = """
define script enrich
script
  match event.amount > 500 of
    case true => let event.tier = "high"
    default => emit {"small": event.amount} => "side"
  end;
  event
end;
create script enrich;
define window pairs from tumbling with size = 2 end;
select event from in where event.level == "error" into enrich;
select {"key": group[0], "n": aggr::stats::count()} from enrich[pairs] group by event.key into out;
select event from enrich/side into out;
"""


def _events() -> list[bytes]:
    rows = [
        {"level": "error" if i % 3 else "info", "key": f"k{i % 4}", "amount": (i * 137) % 1000}
        for i in range(60)
    ]
    raw = [orjson.dumps(r) for r in rows]
    raw[7] = b'{"level": "error", "key": "k1", "amount": "lots"}'  # the script's comparison fails
    raw[11] = b"not json"
    return raw


def _whole(graph: PipelineGraph, values: list[bytes]) -> dict[str, list[Any]]:
    results = PipelineExecutor(graph).process_values("in", values, None, list(range(len(values))))
    return {port: [orjson.loads(v) for v in out] for port, (out, _) in results.items() if out}


def _split(graph: PipelineGraph, values: list[bytes]) -> dict[str, list[Any]]:
    """The prefix, then the rest on the prefix's cut-port events in emission order."""
    split = split_prefix(graph)
    assert split is not None
    traced = PipelineExecutor(split.prefix).process_values_traced(
        "in", values, None, list(range(len(values)))
    )
    rest = PipelineExecutor(split.rest)
    outputs: dict[str, list[Any]] = {}
    rows = list(zip(traced.ports, traced.values, traced.sources, strict=True))
    for port, run in groupby(rows, key=lambda row: row[0]):
        batch = list(run)
        if port not in split.cut_ports:
            outputs.setdefault(port, []).extend(orjson.loads(v) for _, v, _ in batch)
            continue
        results = rest.process_values(port, [v for _, v, _ in batch], None, [s for _, _, s in batch])
        for out_port, (out, _) in results.items():
            outputs.setdefault(out_port, []).extend(orjson.loads(v) for v in out)
    return outputs


def test_split_cuts_after_the_stateless_prefix(query) -> None:
    split = split_prefix(query(ENRICH_THEN_COUNT))
    assert split is not None
    assert split.cut_ports == ("cut:enrich/out",)
    prefix_work = {n.name for n in split.prefix.nodes.values() if n.kind not in ("input", "output")}
    rest_work = {n.name for n in split.rest.nodes.values() if n.kind not in ("input", "output")}
    assert prefix_work == {"enrich", "select_1", "select_3"}  # select_3 only forwards `side` to out
    assert rest_work == {"select_2"}
    assert split.rest.inputs == ["cut:enrich/out"]
    assert not split.prefix.stateful and split.rest.stateful


def test_no_split_when_nothing_runs_before_the_state(query) -> None:
    assert split_prefix(query(RFC_COUNTER)) is None  # its prefix only routes events


def test_prefix_then_rest_gives_what_the_whole_graph_gives(query) -> None:
    graph = query(ENRICH_THEN_COUNT)
    values = _events()
    whole, split = _whole(graph, values), _split(graph, values)
    assert split == whole
    assert whole["out"] and whole["err"]  # the case covers windows, side emits and errors


def test_traced_outputs_name_the_input_they_came_from(query) -> None:
    split = split_prefix(query(ENRICH_THEN_COUNT))
    assert split is not None
    values = _events()
    traced = PipelineExecutor(split.prefix).process_values_traced(
        "in", values, None, list(range(len(values)))
    )
    assert traced.sources == sorted(traced.sources)
    for port, value, source in zip(traced.ports, traced.values, traced.sources, strict=True):
        if port == "cut:enrich/out":
            assert orjson.loads(value)["key"] == orjson.loads(values[source])["key"]


@pytest.mark.parametrize(
    ("text", "sound"),
    [
        ("select aggr::stats::count() from in[w] group by event.k into out;", True),
        ("select aggr::stats::count() from in[w] into out;", False),  # one group: nothing to spread
        ("select aggr::stats::count() from in[w] group by set(event.a, event.b) into out;", False),
        ("select aggr::stats::count() from in[w] group by each(event.xs) into out;", False),
        ("select aggr::stats::count() from in[capped] group by event.k into out;", False),
    ],
)
def test_groups_are_independent_only_where_that_is_sound(query, text: str, sound: bool) -> None:
    windows = """
    define window w from tumbling with size = 2 end;
    define window capped from tumbling with size = 2, max_groups = 10 end;
    """
    assert (independent_groups(query(windows + text)) is not None) is sound


def test_a_stateful_script_keeps_the_pipeline_one_stream(query) -> None:
    split = split_prefix(query(RFC_COUNTER))
    assert split is None
    assert independent_groups(query(RFC_COUNTER)) is None


def test_group_streams_are_stable_and_spread_the_groups(query) -> None:
    graph = query(
        "define window w from tumbling with size = 2 end;\n"
        "select aggr::stats::count() from in[w] group by event.k into out;"
    )
    select = independent_groups(graph)
    assert select is not None
    first, again = GroupStreams(graph, select), GroupStreams(graph, select)
    streams = [first.stream(orjson.dumps({"k": f"key{i}"}), None) for i in range(200)]
    assert streams == [again.stream(orjson.dumps({"k": f"key{i}"}), None) for i in range(200)]
    assert len(set(streams)) > GROUP_STREAMS // 2
    assert first.stream(orjson.dumps({"k": "key3", "other": 1}), None) == streams[3]
    assert first.stream(b"not json", None) == "0"


def test_remembered_streams_match_a_fresh_hash_and_memory_stays_bounded(query, monkeypatch) -> None:
    import contraflow.pipeline.spark.keying as keying

    graph = query(
        "define window w from tumbling with size = 2 end;\n"
        "select aggr::stats::count() from in[w] group by event.k into out;"
    )
    select = independent_groups(graph)
    assert select is not None
    monkeypatch.setattr(keying, "_REMEMBERED_GROUPS", 8)
    warm = GroupStreams(graph, select)
    values: list[Any] = [f"key{i}" for i in range(20)] + [7, 7.5, None, ["a"], {"x": 1}]
    first_pass = [warm.stream(orjson.dumps({"k": v}), None) for v in values]
    second_pass = [warm.stream(orjson.dumps({"k": v}), None) for v in values]
    fresh = [GroupStreams(graph, select).stream(orjson.dumps({"k": v}), None) for v in values]
    assert first_pass == second_pass == fresh
    assert 0 < len(warm._remembered) <= 8


@pytest.mark.parametrize("partitions", [2, 3])
def test_stream_keys_spread_the_streams_evenly_over_sparks_partitions(spark, partitions: int) -> None:
    from pyspark.sql import functions as F

    keys = stream_keys(spark, partitions)
    assert [stream_number(key) for key in keys] == list(range(GROUP_STREAMS))
    frame = spark.createDataFrame([(key,) for key in keys], "key string").repartition(partitions, "key")
    placed = dict(frame.select("key", F.spark_partition_id().alias("p")).collect())
    # The same hash partitioning `groupBy(key)` uses: stream i lands in partition i mod partitions.
    assert [placed[key] for key in keys] == [i % partitions for i in range(GROUP_STREAMS)]
    assert stream_keys(spark, partitions) == keys  # stable: part of the state's layout
