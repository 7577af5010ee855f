"""Python operators on Spark: a flow with python::batch and python::map deployed on the runtime
(what `contraflow run` runs) with the session's Spark and SPU; the states of the python::map and
of a python::batch that keeps one exported from the flow's checkpoint and imported into another
query."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from contraflow.lang.troy.compiler import compile_file
from contraflow.pipeline.spark.state import export_state, import_state
from contraflow.runtime.runtime import Runtime
from contraflow.spark.checkpoint import checkpoint_path
from contraflow.spu.client import SpuClient
from tests.pipeline.spark.harness import SparkPipeline
from tests.runtime.harness import JSON_LINES, flow_id, read_events, wait_for

KEYS = "abcab"

# The user's module, written next to the flow file (a name of its own: a worker imports a name once).
MODULE = """
def scale(table, ctx):
    import pyarrow.compute as pc
    return table.append_column("scaled", pc.multiply(table["n"], ctx.args["by"]))


def count_per_key(event, ctx):
    if event.get("fail"):
        raise KeyError(event["n"])
    counts = ctx.state or {}
    counts[event["key"]] = counts.get(event["key"], 0) + 1
    ctx.state = counts
    return {**event, "count": counts[event["key"]]}


def running_total(table, ctx):
    import pyarrow.compute as pc
    totals = pc.add(pc.cumulative_sum(table["n"]), ctx.state or 0)
    ctx.state = totals[-1].as_py()
    return table.append_column("total", totals)
"""


def flow_source(fid: str, module: str, tmp: Path) -> str:
    return f"""
define flow {fid}
flow
{JSON_LINES}
  define pipeline scored
  pipeline
    define operator scale from python::batch with module = "{module}", function = "scale", args = {{"by": 3}} end;
    define operator count from python::map with module = "{module}", function = "count_per_key" end;
    define operator total from python::batch with module = "{module}", function = "running_total" end;
    create operator scale;
    create operator count;
    create operator total;
    select event from in into scale;
    select event from scale into count;
    select event from count into total;
    select event from total into out;
  end;
  create connector input from lines with path = "{tmp}/in.jsonl" end;
  create connector output from lines with path = "{tmp}/out.jsonl", mode = "truncate" end;
  create connector errors from lines with path = "{tmp}/err.jsonl", mode = "truncate" end;
  create pipeline scored;
  connect /connector/input to /pipeline/scored;
  connect /pipeline/scored to /connector/output;
  connect /pipeline/scored/err to /connector/errors;
end;
deploy flow {fid};
"""


def test_a_flow_scores_with_python_batch_and_map_errors_flow_on_and_the_state_moves(
    spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path
) -> None:
    fid = flow_id("pyops")
    module = f"{fid}_udfs"
    (tmp_path / f"{module}.py").write_text(MODULE)  # found next to the flow file
    events = [{"key": KEYS[n % len(KEYS)], "n": n} for n in range(40)]
    events[17]["fail"] = True
    (tmp_path / "in.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    flow = tmp_path / "flow.troy"
    flow.write_text(flow_source(fid, module, tmp_path))

    async def scenario() -> None:
        runtime = Runtime(spu_addr, spark, tmp_path / "data")
        await runtime.deploy_graphs(compile_file(flow))
        try:
            await wait_for(lambda: len(read_events(tmp_path / "out.jsonl")) >= 39, what="the scored events")
            await wait_for(lambda: len(read_events(tmp_path / "err.jsonl")) >= 1, what="the err event")
        finally:
            await runtime.quiesce_all(shutdown=False)

    asyncio.run(scenario())
    out = read_events(tmp_path / "out.jsonl")
    kept = [e for e in events if not e.get("fail")]
    seen: Counter[str] = Counter()
    expected = []
    total = 0
    for e in kept:
        seen[e["key"]] += 1
        total += e["n"]
        expected.append({**e, "scaled": 3 * e["n"], "count": seen[e["key"]], "total": total})
    assert out == expected  # in order, each once, counted per key across micro-batches
    [error] = read_events(tmp_path / "err.jsonl")
    assert (error["type"], error["error"], error["node"], error["operator"]) == (
        "KeyError",
        "17",
        "count",
        "python::map",
    )
    assert error["event"] == {"key": KEYS[17 % 5], "n": 17, "fail": True, "scaled": 51}

    # The states, exported from the flow's checkpoint, continue in another query.
    snapshot = export_state(spark, checkpoint_path(tmp_path / "data", fid, "scored"))
    assert snapshot["keys"][""] == {"count": dict(seen), "total": total}
    moved = SparkPipeline(spark, spu, spu_addr, compile_file(flow).flows[fid].pipelines["scored"], tmp_path)
    import_state(moved.checkpoint, orjson.loads(orjson.dumps(snapshot)))
    moved.start()
    try:
        moved.feed({"key": "c", "n": 40}, {"key": "a", "n": 41})
        moved.drain()
        assert [(v["key"], v["count"], v["total"]) for v in moved.values()] == [
            ("c", seen["c"] + 1, total + 40),
            ("a", seen["a"] + 1, total + 81),
        ]
    finally:
        moved.stop()
