"""Full flows through the runtime against the bare Spark bridge, and end-to-end latency at 10k events/s.

- flow: file source (64 KiB reads) -> `select event from in into out` pipeline
  -> file sink, JSON events of ~200 bytes, timed from deploy until the sink
  file holds them all;
- baseline, same run and data: the same events already in a topic, copied by a
  bare passthrough query of the `contraflow` format (topic -> topic), timed from
  start until processAllAvailable returns;
- ratio = flow / baseline: what connectors, codecs and contraflow cost on top of Spark;
- latency: a `bench` source paced at 10k events/s (every event due goes out
  in one pull, stamped when it was due) -> pipeline -> back into the same
  `bench` connector: p50/p99/max of send-to-delivery time of the events sent
  after a warm-up, the rate reached, and `sustained` (the rate held and the
  backlog of sent-but-not-back events did not grow). While 10k is not
  sustained the rate steps down (5k, 2.5k) to the highest one that is. Then
  the floor: 200 events/s, where each micro-batch is small and latency is
  Spark's fixed per-batch cost, with the runtime's default trigger (a batch
  every 100 ms) and with `trigger_ms = 0` (back to back, 10 ms idle polls)
  side by side. Each run also gives the median duration and
  size of its Spark batches.

Prints one JSON object. Run: PYTHONPATH=src python benchmarks/flows.py [latency]
(`latency`: only the latency runs, one to two minutes).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

EVENTS = 50_000
REPEATS = 3
LATENCY_RATES = (10_000, 5_000, 2_500)  # asked first; the next ones only while the flow falls behind
FLOOR_RATE = 200  # events/s: every batch is small, so latency is Spark's fixed per-batch cost
BACKLOG_SAMPLE_S = 0.5
_RUNS = itertools.count()  # flow ids stay unique when a rate and trigger repeat


def make_events(path: Path, count: int) -> list[bytes]:
    """JSON lines of about 200 bytes each."""
    lines = [
        orjson.dumps(
            {
                "id": i,
                "ts": 1_700_000_000_000 + i,
                "service": ("billing", "auth", "search", "cart")[i % 4],
                "level": ("info", "warn", "error")[i % 3],
                "message": "request handled in the usual amount of time",
                "latency_ms": i % 997,
                "host": f"host-{i % 16:02d}.example.internal",
            }
        )
        for i in range(count)
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return lines


def flow_troy(fid: str, body: str, args: str = "") -> str:
    head = f"args\n  {args}\n" if args else ""
    return f"""
define flow {fid}
{head}flow
  define connector lines from file
  args path, mode = "read", chunk_size = 8192
  with codec = "json", preprocessors = ["separate"], postprocessors = ["separate"],
       config = {{"path": args.path, "mode": args.mode, "chunk_size": args.chunk_size}}
  end;
  define pipeline pass
  pipeline
    select event from in into out;
  end;
  create pipeline pass;
  define pipeline kept
  pipeline
    select event from in where event.level != "none" into out;
  end;
  create pipeline kept;
  {body}
end;
deploy flow {fid};
"""


def count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


async def run_file_flow(spu: str, spark: Any, work: Path, fid: str, source: Path) -> float:
    """Seconds from deploy until the sink file holds every event."""
    from contraflow.runtime.runtime import Runtime

    out = work / f"{fid}.out.jsonl"
    body = f"""
  create connector input from lines with path = "{source}", chunk_size = 65536 end;
  create connector output from lines with path = "{out}", mode = "truncate" end;
  connect /connector/input to /pipeline/pass;
  connect /pipeline/pass to /connector/output;
"""
    runtime = Runtime(spu, spark, work / "data")
    started = time.perf_counter()
    await runtime.deploy(flow_troy(fid, body), "<bench>")
    while count_lines(out) < EVENTS:
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    await runtime.quiesce_all(shutdown=False)
    return elapsed


def run_bridge(spu: str, spark: Any, work: Path, name: str, lines: list[bytes]) -> float:
    """Seconds for a bare contraflow-format passthrough query to copy every event."""
    from contraflow.spu.client import SpuClient

    src, dst = f"{name}-in", f"{name}-out"
    with SpuClient(spu) as client:
        client.create_topic(src)
        client.create_topic(dst)
        for i in range(0, len(lines), 5000):
            client.produce(src, 0, lines[i : i + 5000])
    started = time.perf_counter()
    query = (
        spark.readStream.format("contraflow")
        .option("spu", spu)
        .option("topic", src)
        .load()
        .select("value", "headers")
        .writeStream.format("contraflow")
        .option("spu", spu)
        .option("topic", dst)
        .option("checkpointLocation", str(work / "checkpoints" / name))
        .start()
    )
    query.processAllAvailable()
    elapsed = time.perf_counter() - started
    query.stop()
    return elapsed


@dataclass(frozen=True)
class LatencyRun:
    """One paced run: `rate` events/s from the `bench` source, through a pipeline, back into `bench`.

    `pass` is routing-only, so the runtime aliases it and no Spark query runs; `kept` filters (and
    keeps every event), so its events go through a Spark micro-batch: both are measured.
    """

    rate: int
    seconds: float
    warmup: float
    trigger_ms: int | None = None  # None: the runtime's default
    pipeline: str = "pass"


async def run_latency(spu: str, spark: Any, work: Path, source: Path, run: LatencyRun) -> dict[str, Any]:
    """Latency of every event sent after the warm-up, whether the flow kept up, and Spark's batches."""
    from contraflow.runtime.runtime import Runtime

    fid = f"latency{run.rate}{run.pipeline}n{next(_RUNS)}t{run.trigger_ms if run.trigger_ms is not None else 'default'}"
    body = f"""
  define connector bench from bench
  with codec = "json", preprocessors = ["separate"],
       config = {{"path": "{source}", "interval": {1_000_000_000 // run.rate},
                  "stop_after_secs": {run.seconds}, "warmup_secs": {run.warmup}}}
  end;
  create connector bench;
  connect /connector/bench to /pipeline/{run.pipeline};
  connect /pipeline/{run.pipeline} to /connector/bench;
"""
    args = (
        ""
        if run.trigger_ms is None
        else f'pipelines = {{"{run.pipeline}": {{"trigger_ms": {run.trigger_ms}}}}}'
    )
    runtime = Runtime(spu, spark, work / "data")
    backlog: list[int] = []  # sent - received, sampled: grows when the flow falls behind
    depths: dict[str, list[int]] = {}  # where the backlog sits: each channel's depth, sampled
    quiet = io.TextIOWrapper(io.BytesIO())  # the bench connector prints its report to stdout's buffer
    with contextlib.redirect_stdout(quiet):
        await runtime.deploy(flow_troy(fid, body, args), "<bench>")
        flow = runtime.flows[fid]
        bench = flow.connectors["bench"].connector
        while not runtime.stop_requested.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(runtime.stop_requested.wait(), BACKLOG_SAMPLE_S)
            status = bench.status()
            if status["sent"] and len(backlog) * BACKLOG_SAMPLE_S < run.seconds:
                backlog.append(status["sent"] - status["received"])
                for state_of, state in (flow.monitor.states if flow.monitor else {}).items():
                    depths.setdefault(state_of.split(".", 1)[1], []).append(state.depth)
        batches = [
            p for pipeline in flow.pipelines.values() if pipeline.query for p in pipeline.query.recentProgress
        ]
        await runtime.quiesce_all(shutdown=False)
    report = dict(getattr(bench, "report", None) or bench.finish())  # type: ignore[attr-defined]
    return summarize(run, report, backlog, batches) | {
        "channel_depth_median": {name: round(statistics.median(d)) for name, d in sorted(depths.items())}
    }


def summarize(
    run: LatencyRun, report: dict[str, Any], backlog: list[int], batches: list[dict[str, Any]]
) -> dict[str, Any]:
    """The figures of one run; `sustained` when the rate held and the backlog did not grow."""
    latency = report.get("latency_ns") or {}
    quarter = max(1, len(backlog) // 4)
    early = statistics.median(backlog[quarter : 2 * quarter] or [0])
    late = statistics.median(backlog[-quarter:] or [0])
    rate = float(report.get("sent_per_s", 0))
    sustained = (
        rate >= 0.95 * run.rate
        and report.get("received") == report.get("sent")
        and late <= 1.25 * early + 0.5 * run.rate
    )
    steady = [b for b in batches if b.get("numInputRows")][2:]  # past the query's first batches
    return {
        "pipeline": run.pipeline,
        "asked_events_per_s": run.rate,
        "sent_events_per_s": round(rate),
        "trigger_ms": run.trigger_ms,
        "sustained": sustained,
        "measured_events": latency.get("count", 0),
        "p50_ms": ms(latency.get("p50")),
        "p99_ms": ms(latency.get("p99")),
        "max_ms": ms(latency.get("max")),
        "backlog_events": {"early": round(early), "late": round(late)},
        "spark_batch_ms_median": median_of(steady, lambda b: b["durationMs"]["triggerExecution"]),
        "spark_batch_rows_median": median_of(steady, lambda b: b["numInputRows"]),
    }


def ms(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 1)


def median_of(items: list[dict[str, Any]], key: Any) -> float | None:
    return round(statistics.median(key(b) for b in items)) if items else None


def latency_runs(spu: str, spark: Any, work: Path, source: Path) -> dict[str, Any]:
    """10k events/s, stepping the rate down until the flow keeps up; then the floor at a low rate
    with the runtime's default trigger (100 ms) and with batches back to back (`trigger_ms = 0`)."""
    runs = []
    for i, rate in enumerate(LATENCY_RATES):
        seconds, warmup = (12, 5) if i == 0 else (10, 4)
        runs.append(asyncio.run(run_latency(spu, spark, work, source, LatencyRun(rate, seconds, warmup))))
        if runs[-1]["sustained"]:
            break
    floor = [
        asyncio.run(run_latency(spu, spark, work, source, LatencyRun(FLOOR_RATE, 8, 3, trigger)))
        for trigger in (None, 0)
    ]
    through_spark = asyncio.run(
        run_latency(spu, spark, work, source, LatencyRun(LATENCY_RATES[0], 30, 15, pipeline="kept"))
    )
    sustained = [r for r in runs if r["sustained"]]
    return {
        "latency_at_10k": runs[0],
        "latency_at_10k_spark_query": through_spark,
        "latency_highest_sustained": sustained[0] if sustained else None,
        "latency_steps": runs[1:],
        "latency_floor": floor[0],
        "latency_floor_back_to_back": floor[1],
    }


def main() -> None:
    from contraflow.spark.session import session
    from contraflow.spu.embedded import EmbeddedSpu

    with tempfile.TemporaryDirectory(prefix="contraflow-bench-") as tmp:
        work = Path(tmp)
        source = work / "events.jsonl"
        lines = make_events(source, EVENTS)
        with EmbeddedSpu(work / "spu", mode="process") as spu:
            spark = session(master="local[2]", data_dir=work)
            run_bridge(spu.addr, spark, work, "warmup", lines[:1000])  # Python workers start cold
            result: dict[str, Any] = {
                "benchmark": "flows",
                "event_bytes": round(source_bytes(lines) / EVENTS),
            }
            if sys.argv[1:] != ["latency"]:
                result |= throughput(spu.addr, spark, work, source, lines)
            result |= latency_runs(spu.addr, spark, work, source)
            spark.stop()
    sys.stdout.write(json.dumps(result) + "\n")


def throughput(spu: str, spark: Any, work: Path, source: Path, lines: list[bytes]) -> dict[str, Any]:
    """The file flow against the bare bridge, interleaved so that load changes hit both alike."""
    bridge, flow = [], []
    for i in range(REPEATS):
        bridge.append(run_bridge(spu, spark, work, f"bridge{i}", lines))
        flow.append(asyncio.run(run_file_flow(spu, spark, work, f"flow{i}", source)))
    flow_rate = EVENTS / statistics.median(flow)
    bridge_rate = EVENTS / statistics.median(bridge)
    return {
        "events": EVENTS,
        "repeats": REPEATS,
        "flow_events_per_s": round(flow_rate),
        "bridge_passthrough_events_per_s": round(bridge_rate),
        "ratio_flow_to_bridge": round(flow_rate / bridge_rate, 3),
        "flow_seconds": [round(s, 2) for s in flow],
        "bridge_seconds": [round(s, 2) for s in bridge],
    }


def source_bytes(lines: list[bytes]) -> int:
    return sum(len(line) + 1 for line in lines)


if __name__ == "__main__":
    main()
