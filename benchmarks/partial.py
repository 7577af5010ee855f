"""w1's two Spark stages in one process, with and without partial aggregation before the shuffle.

Prints one JSON object. Usage: python benchmarks/partial.py [EVENTS] [--batch=ROWS] [--stamp=ROWS] [--rounds=N]

The events and the pipeline are `hot_path.py`'s w1 (its generator and its
query). Each batch of ROWS source rows (default 10,000; log timestamps shared
by STAMP rows, default 1,000, as a produce batch shares one) goes through the
read task's `PackEvents` (prefix, then envelopes; folded or not), then the
stateful call (`arrival_order`, then the `PipelineProcessor`'s run) per group
stream key, as `tests/pipeline/spark/partial_harness.py` does. Only Spark's shuffle,
JVM and state store are left out. Four sides, each after a prefix run per
event (`CONTRAFLOW_COLUMNAR=off`) and after a columnar one, folded or not,
measured in N interleaved rounds (default 3; the minimum is reported, the box
being shared). Reported per side: CPU µs per source event of each stage, rows
that crossed to the stateful stage, and whether the outputs were the same.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT), str(ROOT / "benchmarks")]

import orjson  # noqa: E402
from pyspark.sql import Row  # noqa: E402
from tests.pipeline.spark.partial_harness import SourceBatch, TwoStages  # noqa: E402

from contraflow.pipeline.executor import no_cyclic_gc  # noqa: E402
from contraflow.pipeline.local import compile_query  # noqa: E402
from contraflow.pipeline.spark.plan import COLUMNAR_SWITCH  # noqa: E402
from hot_path import W1_QUERY, make_events  # noqa: E402


def option(name: str, default: int) -> int:
    return next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith(f"--{name}=")), default)


def measure(stages: TwoStages, batches: list[SourceBatch]) -> dict[str, Any]:
    """CPU seconds of each stage over all batches (the outputs are collected too)."""
    read_s = stateful_s = 0.0
    for batch in batches:
        rows = batch.rows("t")
        started = time.process_time()
        with no_cyclic_gc():
            envelopes = stages.pack._envelopes(rows)
        read_s += time.process_time() - started
        keyed: dict[str, list[Row]] = {}
        for row in envelopes.to_pylist():
            keyed.setdefault(row["key"], []).append(Row(**row))
        started = time.process_time()
        for key, records in keyed.items():
            stages.run_key(key, records)
        stateful_s += time.process_time() - started
    return {"read_task_s": read_s, "stateful_s": stateful_s}


def main() -> None:
    count = next((int(a) for a in sys.argv[1:] if not a.startswith("--")), 200_000)
    batch_rows, stamp_rows = option("batch", 10_000), option("stamp", 1_000)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.json"
        make_events(path, count)
        lines = path.read_bytes().splitlines()
    batches = [
        SourceBatch(
            0,
            start,
            lines[start : start + batch_rows],
            [1 + i // stamp_rows for i in range(start, start + batch_rows)][
                : len(lines[start : start + batch_rows])
            ],
        )
        for start in range(0, count, batch_rows)
    ]
    graph = compile_query(W1_QUERY, name="w1.trickle")
    result: dict[str, Any] = {"events": count, "batch_rows": batch_rows, "stamp_rows": stamp_rows}
    sides = {
        f"{prefix}_{fold}": (prefix, fold == "folded")
        for prefix in ("per_event_prefix", "columnar_prefix")
        for fold in ("unfolded", "folded")
    }
    best: dict[str, dict[str, float]] = {}
    outputs: dict[str, list[Any]] = {}
    for _ in range(option("rounds", 3)):
        for name, (prefix, fold) in sides.items():
            os.environ[COLUMNAR_SWITCH] = "on" if prefix == "columnar_prefix" else "off"
            stages = TwoStages(graph, fold=fold, streams=True)
            measure(stages, batches[:1])  # warm up: compile the generated code, fill caches
            stages.outputs, stages.crossed, stages.executors = [], 0, {}
            seconds = measure(stages, batches)
            previous = best.get(name)
            best[name] = {
                "read_task_us_per_event": round(seconds["read_task_s"] / count * 1e6, 3),
                "stateful_us_per_event": round(seconds["stateful_s"] / count * 1e6, 3),
                "rows_crossed": stages.crossed,
                "outputs": len(stages.outputs),
            }
            if previous is not None:
                for key in ("read_task_us_per_event", "stateful_us_per_event"):
                    best[name][key] = min(best[name][key], previous[key])
            outputs[name] = sorted(map(orjson.dumps, stages.outputs))
    result.update(best)
    result["same_outputs"] = all(found == outputs["per_event_prefix_unfolded"] for found in outputs.values())
    result["load_average"] = os.getloadavg()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
