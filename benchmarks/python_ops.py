"""Python operators against their baselines, side by side in one run.

Prints one JSON object. Usage: python benchmarks/python_ops.py [EVENTS] [--only=w1,map]
(default 300,000 events of hot_path.py's kind, both parts).

- `w1`: hot_path's w1 flow through `contraflow run` (file -> keep clicks or value >= 50 ->
  region from country -> 10 s tumbling count per region -> file) twice: with the region lookup
  in a Trickle script (`trickle`, hot_path's own W1) and in a `python::batch` (`python_batch`:
  pyarrow's `index_in` over the batch's `country` column, grouped by `event.region`). Rate:
  events read by the pipeline per second between EVENTS/3 and EVENTS (hot_path's `run_flow`).
  Target: python_batch / trickle >= 0.8.
- `map`: a `python::map` scoring function (a per-key count in its state and a score from two
  fields) on the same events: in the executor's batch entry point (`process_values`, what
  Spark's stateful stage runs per micro-batch) and in a flow through `contraflow run` (file ->
  the map -> file), against a plain loop calling the same function (orjson in, the function,
  orjson out, one core). Target: operator / plain loop >= 0.3. Both in-process figures run with
  the heap kept between batches (`contraflow.heap.keep_freed_heap`), as in Spark's workers.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from contraflow.heap import keep_freed_heap

sys.path.insert(0, str(Path(__file__).parent))
from hot_path import REGIONS, W1, make_events, run_flow  # noqa: E402

EVENTS = 300_000
MODULE = "python_ops_udfs"
UDFS = f"""
import pyarrow as pa
import pyarrow.compute as pc

COUNTRIES = pa.array({list(REGIONS)!r})
NAMES = pa.array({list(REGIONS.values())!r})


def regions(table, ctx):
    found = pc.take(NAMES, pc.index_in(table["country"], value_set=COUNTRIES))
    return table.append_column("region", pc.fill_null(found, "other"))


def score(event, ctx):
    counts = ctx.state if ctx.state is not None else {{}}
    user = event["user_id"]
    counts[user] = counts.get(user, 0) + 1
    ctx.state = counts
    return {{"user": user, "seen": counts[user], "score": event["value"] * (2 if event["event"] == "click" else 1)}}
"""
W1_PYTHON = f"""
  define pipeline work
  pipeline
    define operator regions from python::batch with module = "{MODULE}", function = "regions" end;
    create operator regions;
    define window ten_seconds from tumbling
    with interval = 10000
    script event.ts end;
    select event from in where event.event == "click" or event.value >= 50 into regions;
    select {{"region": group[0], "count": aggr::stats::count()}}
    from regions[ten_seconds] group by event.region into out;
  end;
  create pipeline work;
"""
MAP_QUERY = f"""
    define operator score from python::map with module = "{MODULE}", function = "score" end;
    create operator score;
    select event from in into score;
    select event from score into out;
"""
MAP_FLOW = f"""
  define pipeline work
  pipeline
{MAP_QUERY}
  end;
  create pipeline work;
"""


class Ctx:
    """What a plain loop hands the function: the same three attributes."""

    __slots__ = ("meta", "state", "args")

    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}
        self.state: Any = None
        self.args: dict[str, Any] = {}


def plain_loop(source: Path, function: Any) -> dict[str, Any]:
    lines = source.read_bytes().splitlines()
    ctx = Ctx()
    started = time.process_time()
    for line in lines:
        ctx.meta = {}
        orjson.dumps(function(orjson.loads(line), ctx))
    seconds = time.process_time() - started
    return {"events_per_s": round(len(lines) / seconds), "cpu_seconds": round(seconds, 2)}


def map_in_executor(source: Path) -> dict[str, Any]:
    """The map through `process_values` in chunks of 20,000 (a pipeline's ramped micro-batch)."""
    from contraflow.pipeline.executor import PipelineExecutor
    from contraflow.pipeline.local import compile_query

    graph = compile_query(MAP_QUERY)
    executor = PipelineExecutor(graph)
    lines = source.read_bytes().splitlines()
    started = time.process_time()
    for start in range(0, len(lines), 20_000):
        executor.process_values("in", lines[start : start + 20_000], None, 0)
    seconds = time.process_time() - started
    return {"events_per_s": round(len(lines) / seconds), "cpu_seconds": round(seconds, 2)}


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    only = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")), "w1,map")
    count = int(args[0]) if args else EVENTS
    work = Path(tempfile.mkdtemp(prefix="bench-python-ops-"))
    modules = work / "modules"
    modules.mkdir()
    (modules / f"{MODULE}.py").write_text(UDFS)
    os.environ["CONTRAFLOW_PATH"] = str(modules)  # for the flows' compiler and this process
    sys.path.insert(0, str(modules))
    try:
        source = work / "events.jsonl"
        result: dict[str, Any] = {"events": count, "event_bytes": make_events(source, count)}
        if "w1" in only.split(","):
            trickle = run_flow("w1", W1, source, work, count)
            python = run_flow("w1python", W1_PYTHON, source, work, count)
            result["w1"] = {
                "trickle": _brief(trickle),
                "python_batch": _brief(python),
                "ratio": round(python["events_per_s"] / trickle["events_per_s"], 3),
                "target": 0.8,
            }
        if "map" in only.split(","):
            keep_freed_heap()  # as Spark's Python workers have it: outputs held per chunk otherwise fault pages in
            function = __import__(MODULE).score
            loop = plain_loop(source, function)
            executor = map_in_executor(source)
            flow = run_flow("map", MAP_FLOW, source, work, count)
            result["map"] = {
                "plain_loop": loop,
                "executor": executor,
                "flow": _brief(flow),
                "ratio_executor": round(executor["events_per_s"] / loop["events_per_s"], 3),
                "ratio_flow": round(flow["events_per_s"] / loop["events_per_s"], 3),
                "target": 0.3,
            }
        result["load_average"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _brief(run: dict[str, Any]) -> dict[str, Any]:
    return {k: run[k] for k in ("events_per_s", "cpu_us_per_event", "spark_micro_batches") if k in run}


if __name__ == "__main__":
    main()
