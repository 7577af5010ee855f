"""Benchmark: the pipeline executor's batch entry point vs hand-written Python doing the same work.

Four pipelines over the same ~200-byte JSON events, each run through
`PipelineExecutor.process_values` (what `mapInArrow`/`transformWithState`
call) and through a plain Python loop written for that one job (orjson, dicts,
lists): (a) passthrough, (b) parse, filter, enrich, (c) tumbling 10-second
count per key over 10k keys, (d) the pipeline-state RFC's counter script, plus
a round robin over two outputs (events cross a real node, never parsed).
Prints one JSON object: events/s of both (medians over repeats, the two take
turns so machine load affects them alike) and executor/baseline ratios.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.local import compile_query

N = 100_000
KEYS = 10_000
REPEATS = 3
STEP_NS = 2_000_000  # ingest times 2 ms apart: 200 s of events, 20 windows of 10 s
INTERVAL_NS = 10_000_000_000

PASSTHROUGH = "select event from in into out;"
# Events that cross a real node without being parsed (the per-event cost of the executor itself).
ROUNDROBIN = """
define operator rr from qos::roundrobin with outputs = ["a", "b"] end;
create operator rr;
select event from in into rr;
select event from rr/a into out;
select event from rr/b into out;
"""
ENRICH = """
select merge event of {"alert": true, "service_upper": string::uppercase(event.service)} end
from in
where event.level == "error" or event.status >= 500
into out;
"""
TUMBLING = f"""
define window ten_seconds from tumbling with interval = {INTERVAL_NS} end;
select {{"key": group[0], "count": aggr::stats::count()}}
from in[ten_seconds]
group by event.key
into out;
"""
COUNTER = """
define script counter
script
  let state = match type::is_null(state) of
    case true => 1
    case false => state + 1
  end;
  {"count": state, "event": event}
end;
create script counter;
select event from in into counter;
select event from counter into out;
"""

Batch = tuple[list[bytes], list[int]]


def make_events() -> Batch:
    rng = random.Random(7)
    levels = ["info"] * 8 + ["warn", "error"]
    values = [
        orjson.dumps(
            {
                "key": f"k{rng.randrange(KEYS)}",
                "level": rng.choice(levels),
                "status": rng.choice([200, 200, 200, 404, 503]),
                "service": rng.choice(["web", "db", "cache"]),
                "msg": "request handled by the upstream service in a while",
                "latency_ms": rng.randrange(1000),
                "host": f"host-{rng.randrange(50)}",
            }
        )
        for _ in range(N)
    ]
    return values, [i * STEP_NS for i in range(N)]


def executor_run(query: str) -> Callable[[Batch], int]:
    graph = compile_query(query)

    def run(batch: Batch) -> int:
        executor = PipelineExecutor(graph)
        values, times = batch
        out = executor.process_values("in", values, None, times)
        return len(out.get("out", ([], []))[0])

    return run


def base_passthrough(batch: Batch) -> int:
    values, _ = batch
    out = list(values)
    metas: list[bytes | None] = [None] * len(values)
    return len(out) + 0 * len(metas)


def base_roundrobin(batch: Batch) -> int:
    a: list[bytes] = []
    b: list[bytes] = []
    targets = (a, b)
    for i, raw in enumerate(batch[0]):
        targets[i % 2].append(raw)
    out = a + b
    return len(out)


def base_enrich(batch: Batch) -> int:
    out = []
    for raw in batch[0]:
        event = orjson.loads(raw)
        if event["level"] == "error" or event["status"] >= 500:
            out.append(orjson.dumps({**event, "alert": True, "service_upper": event["service"].upper()}))
    return len(out)


def base_tumbling(batch: Batch) -> int:
    out = []
    windows: dict[str, list[int]] = {}  # key -> [window end, count]
    for raw, now in zip(*batch, strict=True):
        key = orjson.loads(raw)["key"]
        window = windows.get(key)
        if window is None:
            windows[key] = [now + INTERVAL_NS, 1]
        elif window[0] <= now:
            out.append(orjson.dumps({"key": key, "count": window[1]}))
            window[0], window[1] = now + INTERVAL_NS, 1
        else:
            window[1] += 1
    return len(out)


def base_counter(batch: Batch) -> int:
    out = []
    for count, raw in enumerate(batch[0], start=1):
        out.append(orjson.dumps({"count": count, "event": orjson.loads(raw)}))
    return len(out)


def measure(run: Callable[[Batch], int], batch: Batch) -> tuple[float, int]:
    start = time.perf_counter()
    emitted = run(batch)
    return time.perf_counter() - start, emitted


def main() -> None:
    batch = make_events()
    cases: dict[str, tuple[str, Callable[[Batch], int]]] = {
        "passthrough": (PASSTHROUGH, base_passthrough),
        "roundrobin_no_decode": (ROUNDROBIN, base_roundrobin),
        "parse_filter_enrich": (ENRICH, base_enrich),
        "tumbling_count_10k_keys": (TUMBLING, base_tumbling),
        "counter_script": (COUNTER, base_counter),
    }
    result: dict[str, Any] = {"events": N, "repeats": REPEATS}
    for name, (query, baseline) in cases.items():
        run = executor_run(query)
        times: dict[str, list[float]] = {"executor": [], "baseline": []}
        emitted: dict[str, int] = {}
        for _ in range(REPEATS):
            for side, fn in (("executor", run), ("baseline", baseline)):
                seconds, emitted[side] = measure(fn, batch)
                times[side].append(seconds)
        if emitted["executor"] != emitted["baseline"]:
            raise SystemExit(
                f"{name}: executor emitted {emitted['executor']}, baseline {emitted['baseline']}"
            )
        executor_eps = N / statistics.median(times["executor"])
        baseline_eps = N / statistics.median(times["baseline"])
        result[name] = {
            "executor_events_per_s": round(executor_eps),
            "baseline_events_per_s": round(baseline_eps),
            "ratio": round(executor_eps / baseline_eps, 3),
            "emitted": emitted["executor"],
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
