"""A routing-only query alone: SPU topic -> Spark -> SPU topic, per-row against envelopes and ranges.

Prints one JSON object. The query a routing-only pipeline runs (see
`contraflow.pipeline.spark.query._routed_rows`), in one process with its own
local Spark and an embedded SPU in a child process, three ways side by side:

- `rows`: one Spark row per event, as before envelopes: the source's
  `columns = payload` (value and packed headers, decoded from each log batch
  into Arrow) through the JVM to the `contraflow` sink, which encodes them
  back into log batches;
- `envelopes`: one Spark row per log batch (`columns = batches`, see
  `contraflow.spark.log_envelopes`), staged with only its header rewritten;
- `ranges`: one Spark row per read task naming its offsets (`columns =
  ranges`, see `contraflow.spark.log_ranges`), what routing-only pipelines
  run: the sink's task fetches the range and stages it as envelopes.

Each run reads an input topic (JSON events of about 200 bytes with a packed
`meta` header each, in log batches of BATCH records, as the runtime's file
source appends them) into a fresh output topic with the available-now
trigger, modes alternating, after an uncounted warm-up of each: the `large`
topic of EVENTS events and the `small` one of one log batch. Per run: wall
seconds from start to the end of the query, the sum of its micro-batches'
execution time, and CPU seconds of each process kind (`jvm`,
`python_workers` (Spark's, the source's and sink's driver-side calls
included), `driver` (this process), `spu`). A query's fixed cost (starting,
planning, committing) is the small run's CPU; the cost per event is the
difference between the large and the small run over the events between them
(`marginal_cpu_us_per_event`). Medians over the runs. The box is shared: read
the modes side by side, not against other runs.

Usage: python benchmarks/routing.py [EVENTS] [--runs=R] [--batch=BATCH]
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from contraflow.events import META_HEADER
from contraflow.spark import session
from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.protocol.topics import TopicConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hot_path import process_tree  # noqa: E402 - one reading of /proc for every benchmark

EVENTS = 600_000
RUNS = 3
BATCH = 5_000
PARTITIONS = 2
MODES = {"rows": "payload", "envelopes": "batches", "ranges": "ranges"}


def option(name: str, default: int) -> int:
    return next((int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith(f"--{name}=")), default)


def make_events(spu: SpuClient, topic: str, count: int, per_batch: int) -> None:
    meta = [(META_HEADER, b'{"source":"bench"}')]
    for start in range(0, count, per_batch):
        values = [
            orjson.dumps(
                {
                    "ts": 1_700_000_000_000 + i,
                    "user_id": f"user-{(i * 7919) % 50_000:05d}",
                    "event": ("click", "view", "purchase")[i % 3],
                    "value": i % 101,
                    "country": ("DE", "US", "JP", "BR")[i % 4],
                    "session": f"s-{i // 40:08d}",
                    "ua": "Mozilla/5.0 (X11; Linux x86_64) bench/1.0",
                }
            )
            for i in range(start, min(count, start + per_batch))
        ]
        spu.produce(topic, (start // per_batch) % PARTITIONS, values, headers=[meta] * len(values))


def process_kind(pid: int, root: int, spu_pid: int | None) -> str:
    if pid == root:
        return "driver"
    if pid == spu_pid:
        return "spu"
    with contextlib.suppress(OSError):
        command = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0", 1)[0]
        return "jvm" if command.endswith(b"java") else "python_workers"
    return "other"


def cpu_by_kind(spu_pid: int | None) -> dict[str, float]:
    """CPU seconds so far per process kind; a process's reaped children count as its own kind
    (Spark's Python daemon reaps its workers), except the driver's (the JVM, reaped at the end)."""
    root, tick = os.getpid(), os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    for pid in process_tree(root):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
            ticks = sum(int(f) for f in fields[11:13]) + (
                sum(int(f) for f in fields[13:15]) if pid != root else 0
            )
            kind = process_kind(pid, root, spu_pid)
            totals[kind] = totals.get(kind, 0.0) + ticks / tick
    return totals


def run_query(
    spark: Any, spu: SpuClient, embedded: EmbeddedSpu, source: str, mode: str, run: int, work: Path
) -> dict[str, Any]:
    """One available-now run of the routed query in `mode` from `source` into a new topic."""
    addr = embedded.addr
    target = f"{source}-{mode}-{run}"
    spu.create_topic(target, TopicConfig(partitions=PARTITIONS))
    frame = (
        spark.readStream.format("contraflow")
        .option("spu", addr)
        .option("topic", source)
        .option("columns", MODES[mode])
        .load()
    )
    spu_pid = embedded.pid
    before, started = cpu_by_kind(spu_pid), time.perf_counter()
    query = (
        frame.writeStream.format("contraflow")
        .option("spu", addr)
        .option("topic", target)
        .option("checkpointLocation", str(work / f"checkpoint-{target}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.perf_counter() - started
    after = cpu_by_kind(spu_pid)
    written = sum(p.high_watermark for p in spu.describe_topic(target).partitions)
    events = sum(p.high_watermark for p in spu.describe_topic(source).partitions)
    assert written == events, f"{mode}: {written} of {events} events written"
    batches = query.recentProgress
    return {
        "events": events,
        "wall_s": wall,
        "execution_s": sum(p["durationMs"].get("triggerExecution", 0) for p in batches) / 1000,
        "micro_batches": len(batches),
        "rows_through_spark": sum(p["numInputRows"] for p in batches),
        "cpu_s": {k: after.get(k, 0) - before.get(k, 0) for k in sorted(after)},
    }


def summary(large: list[dict[str, Any]], small: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of one mode's runs: rates of the large runs, fixed and marginal CPU by process kind."""
    events, few = large[0]["events"], small[0]["events"]
    kinds = sorted({k for r in large + small for k in r["cpu_s"]})

    def cpu(runs: list[dict[str, Any]], kind: str) -> float:
        return statistics.median(r["cpu_s"].get(kind, 0.0) for r in runs)

    marginal = {k: round((cpu(large, k) - cpu(small, k)) / (events - few) * 1e6, 3) for k in kinds}
    fixed = {k: round(cpu(small, k), 3) for k in kinds}
    return {
        "events_per_s_wall": round(events / statistics.median(r["wall_s"] for r in large)),
        "events_per_s_execution": round(events / statistics.median(r["execution_s"] for r in large)),
        "micro_batches": large[0]["micro_batches"],
        "rows_through_spark": large[0]["rows_through_spark"],
        "cpu_us_per_event_with_fixed_costs": {k: round(cpu(large, k) / events * 1e6, 3) for k in kinds},
        "marginal_cpu_us_per_event": marginal | {"total": round(sum(marginal.values()), 3)},
        "fixed_cpu_s_per_query": fixed | {"total": round(sum(fixed.values()), 3)},
        "runs": len(large),
    }


def main() -> None:
    events = next((int(a) for a in sys.argv[1:] if a.isdigit()), EVENTS)
    runs, per_batch = option("runs", RUNS), option("batch", BATCH)
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedSpu(Path(tmp) / "spu", mode="process") as embedded:
        work = Path(tmp)
        spu = SpuClient(embedded.addr)
        for topic, count in (("large", events), ("small", per_batch)):
            spu.create_topic(topic, TopicConfig(partitions=PARTITIONS))
            make_events(spu, topic, count, per_batch)
        spark = session(master="local[2]", data_dir=work / "spark")
        runs_of: dict[tuple[str, str], list[dict[str, Any]]] = {}
        try:
            for mode in MODES:  # warm-up: JIT (most of a cold JVM's CPU), Python workers, planning
                for topic in ("large", "small"):
                    run_query(spark, spu, embedded, topic, mode, -1, work)
            for run in range(runs):
                for mode in MODES if run % 2 == 0 else reversed(list(MODES)):
                    for topic in ("large", "small"):
                        found = run_query(spark, spu, embedded, topic, mode, run, work)
                        runs_of.setdefault((mode, topic), []).append(found)
        finally:
            spark.stop()
            spu.close()
    results = {mode: summary(runs_of[(mode, "large")], runs_of[(mode, "small")]) for mode in MODES}
    print(
        json.dumps(
            {
                "events": events,
                "events_per_log_batch": per_batch,
                "load_average_at_start": [round(x, 2) for x in load_at_start],
                "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
                **results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
