"""The stateless prefix of hot_path's w1 on one read task's batch: per-event executor vs columnar.

Prints one JSON object. Usage: python benchmarks/columnar.py [EVENTS] [RUNS]
(default 65536 events, 7 runs). CPU µs per event (process time, so threads
count), medians of RUNS, everything side by side in one process on the same
batch of hot_path events:

- `executor`: `PipelineExecutor.process_values_traced` (today's path);
- `columnar`: `ColumnarPlan.run` (parse, prefilter, evaluate, merge, lists
  for `Traced`), and its parts: `parse` (msgspec per row on the plan's
  schema, with the prefilter), `prefilter` (the scans for rows orjson would
  read differently; see benchmarks/columnar_parse.py for the parse alone);
- `pack_events_per_event` / `pack_events_columnar`: what a read task of the
  split w1 runs per batch (prefix, group streams, envelopes), with
  `CONTRAFLOW_COLUMNAR` off and on;
- the engine choice, the same w1 prefix written by hand: `polars` (ndjson
  reader + expressions) and `pyarrow` (JSON reader + pyarrow.compute), and the
  parsers alone: `parse_orjson`, `parse_pyarrow`, `parse_polars`.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

sys.path.insert(0, str(Path(__file__).parent))
from contraflow.pipeline.columnar import ColumnarPlan  # noqa: E402
from contraflow.pipeline.columnar.parse import _unlike_orjson, parse_values  # noqa: E402
from contraflow.pipeline.executor import PipelineExecutor, no_cyclic_gc  # noqa: E402
from contraflow.pipeline.local import compile_query  # noqa: E402
from contraflow.pipeline.spark import plan as plan_module  # noqa: E402
from contraflow.pipeline.spark.envelopes import PackEvents  # noqa: E402
from contraflow.pipeline.spark.keying import GroupStreams, independent_groups  # noqa: E402
from contraflow.pipeline.spark.plan import COLUMNAR_SWITCH, PipelinePlan  # noqa: E402
from contraflow.pipeline.spark.split import split_prefix  # noqa: E402
from contraflow.spark.arrow_log import SOURCE_SCHEMA  # noqa: E402
from hot_path import REGIONS, W1_QUERY, make_events  # noqa: E402

SCHEMA = pa.schema([("event", pa.string()), ("value", pa.float64()), ("country", pa.string())])


def cpu_us_per_event(work: Callable[[], Any], events: int, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return round(statistics.median(times) / events * 1e6, 3)


def by_hand_polars(lines: list[bytes]) -> pl.DataFrame:
    frame = pl.read_ndjson(
        io.BytesIO(b"\n".join(lines)), schema={"event": pl.String, "value": pl.Float64, "country": pl.String}
    )
    keep = (pl.col("event") == "click") | (pl.col("value") >= 50)
    region = pl.col("country").replace_strict(REGIONS, default="other")
    return (
        frame.with_row_index("row").filter(keep).select("row", ('{"region":"' + region + '"}').alias("meta"))
    )


def by_hand_pyarrow(lines: list[bytes]) -> tuple[pa.Array, pa.Array]:
    table = pj.read_json(
        io.BytesIO(b"\n".join(lines)),
        read_options=pj.ReadOptions(use_threads=False, block_size=1 << 26),
        parse_options=pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore"),
    )
    keep = pc.or_(pc.equal(table["event"], "click"), pc.greater_equal(table["value"], 50.0))
    rows = pc.indices_nonzero(keep)
    country = table["country"].take(rows)
    cases = list(REGIONS.items())
    conditions = pa.StructArray.from_arrays(
        [pc.equal(country, c).combine_chunks() for c, _ in cases], [c for c, _ in cases]
    )
    meta = pc.case_when(conditions, *(f'{{"region":"{r}"}}' for _, r in cases), '{"region":"other"}')
    return rows, meta


def source_rows(values: list[bytes]) -> pa.RecordBatch:
    """`values` as the `contraflow` source's rows of one partition."""
    count = len(values)
    stamp = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    columns = {
        "topic": ["t"] * count,
        "partition": [0] * count,
        "offset": list(range(count)),
        "timestamp": [stamp] * count,
        "key": [None] * count,
        "value": values,
        "headers": [[] for _ in range(count)],
    }
    return pa.RecordBatch.from_pydict(columns, schema=SOURCE_SCHEMA)


def pack_events(graph: Any, lines: list[bytes], runs: int, columnar: bool) -> float:
    """CPU µs/event of `PackEvents` on one batch of the split w1, columnar on or off."""
    split = split_prefix(graph)
    assert split is not None
    select = independent_groups(split.rest)
    assert select is not None
    plan = PipelinePlan(graph, "", "w1", {"in": "t"}, {"out": "o"}, "offset")
    pack = PackEvents(
        "in",
        "offset",
        replace(plan, graph=split.prefix),
        split.cut_ports,
        None,
        GroupStreams(split.rest, select),
    )
    rows = source_rows(lines)
    plan_module._columnar.clear()
    os.environ[COLUMNAR_SWITCH] = "on" if columnar else "off"

    def envelopes() -> None:
        with no_cyclic_gc():
            pack._envelopes(rows)

    try:
        return cpu_us_per_event(envelopes, len(lines), runs)
    finally:
        os.environ.pop(COLUMNAR_SWITCH)
        plan_module._columnar.clear()


def hot_path_lines() -> tuple[list[bytes], int]:
    """`EVENTS` hot_path events (argv[1], default 65536) as JSON lines, and `RUNS` (argv[2], 7)."""
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 65536
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    with TemporaryDirectory() as work:
        source = Path(work) / "events.jsonl"
        make_events(source, count)
        return source.read_bytes().splitlines(), runs


def main() -> None:
    lines, runs = hot_path_lines()
    count = len(lines)
    column = pa.array(lines, pa.binary())
    split = split_prefix(compile_query(W1_QUERY))
    assert split is not None
    prefix = split.prefix
    plan = ColumnarPlan.compile(prefix, "in")
    assert plan is not None
    executor = PipelineExecutor(prefix)
    ingest = list(range(count))
    reference = executor.process_values_traced("in", lines, None, ingest)
    columnar = plan.run(executor, column, None, ingest)
    assert (columnar.ports, columnar.values, columnar.metas, columnar.sources) == (
        reference.ports,
        reference.values,
        reference.metas,
        reference.sources,
    )
    no_fallback = pa.array([False] * count)
    whole = compile_query(W1_QUERY)
    result = {
        "events": count,
        "runs": runs,
        "load_average": os.getloadavg(),
        "columnar_rows": columnar.columnar_rows,
        "cpu_us_per_event": {
            "executor": cpu_us_per_event(
                lambda: executor.process_values_traced("in", column.to_pylist(), None, ingest), count, runs
            ),
            "columnar": cpu_us_per_event(lambda: plan.run(executor, column, None, ingest), count, runs),
            "pack_events_per_event": pack_events(whole, lines, runs, columnar=False),
            "pack_events_columnar": pack_events(whole, lines, runs, columnar=True),
            "columnar_parse_and_prefilter": cpu_us_per_event(
                lambda: parse_values(column, SCHEMA, no_fallback), count, runs
            ),
            "columnar_prefilter": cpu_us_per_event(lambda: _unlike_orjson(column), count, runs),
            "by_hand_polars": cpu_us_per_event(lambda: by_hand_polars(lines), count, runs),
            "by_hand_pyarrow": cpu_us_per_event(lambda: by_hand_pyarrow(lines), count, runs),
            "parse_orjson": cpu_us_per_event(lambda: [orjson.loads(v) for v in lines], count, runs),
            "parse_pyarrow": cpu_us_per_event(
                lambda: pj.read_json(
                    io.BytesIO(b"\n".join(lines)),
                    read_options=pj.ReadOptions(use_threads=False, block_size=1 << 26),
                    parse_options=pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore"),
                ),
                count,
                runs,
            ),
            "parse_polars": cpu_us_per_event(
                lambda: pl.read_ndjson(
                    io.BytesIO(b"\n".join(lines)),
                    schema={"event": pl.String, "value": pl.Float64, "country": pl.String},
                ),
                count,
                runs,
            ),
        },
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
