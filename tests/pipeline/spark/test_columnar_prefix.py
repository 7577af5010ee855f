"""The stateless prefix of a split pipeline runs columnar in the source's read task, with the same results.

`PackEvents` is what each read task runs: with the w1 prefix of
benchmarks/hot_path.py it answers the rows from columns (`columnar_rows`), and
its envelopes hold the events the per-event prefix gives. On a real Spark
between real SPU topics, the whole pipeline gives the sink the output of the
per-event executor.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest
from benchmarks.hot_path import COUNTRIES, KINDS, REGIONS_SCRIPT, W1_FILTER

from contraflow.events import META_HEADER
from contraflow.pipeline.columnar import ColumnarTraced
from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.local import compile_query
from contraflow.pipeline.spark import plan as plan_module
from contraflow.pipeline.spark.envelopes import PackEvents, from_ipc
from contraflow.pipeline.spark.keying import GroupStreams, independent_groups
from contraflow.pipeline.spark.plan import COLUMNAR_SWITCH, PipelinePlan
from contraflow.pipeline.spark.split import split_prefix
from contraflow.spark.arrow_log import SOURCE_SCHEMA
from contraflow.spu.client import SpuClient
from tests.pipeline.spark.harness import SparkPipeline

# w1 of benchmarks/hot_path.py, with a count window so that the output does not depend on time.
W1 = (
    REGIONS_SCRIPT
    + "define window hundred from tumbling with size = 100 end;\n"
    + W1_FILTER
    + 'select {"region": group[0], "count": aggr::stats::count()}\n'
    + "from regions[hundred] group by $region into out;\n"
)


def events(count: int) -> list[bytes]:
    rows = [
        orjson.dumps(
            {
                "ts": 1_700_000_000_000 + i,
                "event": KINDS[(i * 31) % 4],
                "value": (i * 37) % 101,
                "country": COUNTRIES[(i * 13) % len(COUNTRIES)],
            }
        )
        for i in range(count)
    ]
    rows[17] = b'{"event": "view", "country": "DE"}'  # `value` missing where the `or` reads it: err
    rows[18] = b"{broken"
    rows[19] = b'{"event": "click", "value": 3, "country": 49}'  # no case for 49: "other"
    return rows


def source_rows(values: list[bytes], metas: dict[int, bytes]) -> pa.RecordBatch:
    headers = [[{"key": META_HEADER, "value": metas[i]}] if i in metas else [] for i in range(len(values))]
    stamp = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    return pa.RecordBatch.from_pydict(
        {
            "topic": ["t"] * len(values),
            "partition": [0] * len(values),
            "offset": list(range(len(values))),
            "timestamp": [stamp] * len(values),
            "key": [None] * len(values),
            "value": values,
            "headers": headers,
        },
        schema=SOURCE_SCHEMA,
    )


def test_the_w1_prefix_runs_columnar_in_pack_events(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = compile_query(W1)
    split = split_prefix(graph)
    assert split is not None
    plan = PipelinePlan(graph, "", "w1", {"in": "t"}, {"out": "o"}, "offset")
    prefix = replace(plan, graph=split.prefix)
    select = independent_groups(split.rest)
    assert select is not None
    pack = PackEvents("in", "offset", prefix, split.cut_ports, None, GroupStreams(split.rest, select))
    rows = source_rows(events(3000), {5: b'{"seen": true}'})

    traced = pack._run_prefix(rows, rows.column("offset"))
    assert isinstance(traced, ColumnarTraced)
    # Per event: rows 17 and 18 (errors), 19 (a number where strings are compared), 5 (metadata).
    assert traced.columnar_rows == 3000 - 4
    columnar = envelopes(pack, rows)

    monkeypatch.setattr(plan_module, "_columnar", {})
    monkeypatch.setenv(COLUMNAR_SWITCH, "off")
    assert prefix.columnar("in") is None
    per_event = envelopes(pack, rows)
    assert columnar == per_event
    assert len(columnar) >= 4  # the regions' group streams, keyed from the columns
    targets = [e["target"] for _, envelope in columnar for e in envelope]
    assert targets.count("out:err") == 2 and len(targets) > 1500


def envelopes(pack: PackEvents, rows: pa.RecordBatch) -> list[tuple[str, list[dict[str, Any]]]]:
    """(key, events) of each envelope `pack` makes of `rows`."""
    batch = next(pack(iter([rows])))
    return [
        (key, from_ipc(data).to_pylist())
        for key, data in zip(batch.column("key").to_pylist(), batch.column("events").to_pylist(), strict=True)
    ]


@pytest.fixture()
def w1(spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path) -> Iterator[SparkPipeline]:
    pipeline = SparkPipeline(spark, spu, spu_addr, compile_query(W1), tmp_path)
    yield pipeline
    pipeline.stop()


def test_w1_on_spark_runs_its_prefix_columnar_and_gives_the_executors_output(w1: SparkPipeline) -> None:
    split = split_prefix(w1.graph)
    assert split is not None
    # The plan fact the read tasks act on: the same graph, compiled by the same code there.
    prefix_plan = PipelinePlan(split.prefix, "", w1.prefix, dict(w1.inputs), {}, "offset")
    assert prefix_plan.columnar("in") is not None
    values = events(1000)
    w1.start(ingest="offset")
    w1.feed(*values[:600])
    w1.feed(*values[600:])
    w1.drain()
    executor = PipelineExecutor(w1.graph)
    want = executor.process_values("in", values, None, list(range(len(values))))
    # Each region's windows in order (regions run as independent streams, so only that order holds).
    assert by_region(w1.values()) == by_region([orjson.loads(v) for v in want["out"][0]])
    assert [e["event"] for e in w1.values("err")] == [orjson.loads(v)["event"] for v in want["err"][0]]
    assert len(w1.values()) >= 4 and len(w1.values("err")) == 2


def by_region(rows: list[Any]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for row in rows:
        grouped.setdefault(row["region"], []).append(row["count"])
    return grouped
