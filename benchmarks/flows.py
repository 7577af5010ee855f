"""Full flows through the runtime against the bare Spark bridge, and end-to-end latency at 10k events/s.

- flow: file source (64 KiB reads) -> `select event from in into out` pipeline
  -> file sink, JSON events of ~200 bytes, timed from deploy until the sink
  file holds them all;
- baseline, same run and data: the same events already in a topic, copied by a
  bare passthrough query of the `contraflow` format (topic -> topic), timed from
  start until processAllAvailable returns;
- ratio = flow / baseline: what connectors, codecs and contraflow cost on top of Spark;
- latency: a `bench` source emitting 10k events/s -> pipeline -> back into the
  same `bench` connector, p50/p99 of ingest-to-delivery time after a warm-up.

Prints one JSON object. Run: PYTHONPATH=src python benchmarks/flows.py
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

EVENTS = 50_000
REPEATS = 3
LATENCY_RATE = 10_000
LATENCY_SECONDS = 8


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


def flow_troy(fid: str, body: str) -> str:
    return f"""
define flow {fid}
flow
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
    await runtime.quiesce_all()
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


async def run_latency(spu: str, spark: Any, work: Path, source: Path) -> dict[str, Any]:
    """The bench connector's report for LATENCY_RATE events/s through a pipeline and back."""
    from contraflow.runtime.runtime import Runtime

    interval = 1_000_000_000 // LATENCY_RATE
    body = f"""
  define connector bench from bench
  with codec = "json", preprocessors = ["separate"],
       config = {{"path": "{source}", "interval": {interval}, "stop_after_secs": {LATENCY_SECONDS},
                  "warmup_secs": 3}}
  end;
  create connector bench;
  connect /connector/bench to /pipeline/pass;
  connect /pipeline/pass to /connector/bench;
"""
    runtime = Runtime(spu, spark, work / "data")
    captured = io.TextIOWrapper(io.BytesIO())
    with contextlib.redirect_stdout(captured):  # the bench connector prints its own report
        await runtime.deploy(flow_troy("latency", body), "<bench>")
        await asyncio.wait_for(runtime.stop_requested.wait(), LATENCY_SECONDS + 120)
        await runtime.quiesce_all()
    connector = runtime.flows["latency"].connectors["bench"].connector
    report = getattr(connector, "report", None) or connector.finish()  # type: ignore[attr-defined]
    return dict(report)


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
            bridge, flow = [], []
            for i in range(REPEATS):  # interleaved, so load changes hit both alike
                bridge.append(run_bridge(spu.addr, spark, work, f"bridge{i}", lines))
                flow.append(asyncio.run(run_file_flow(spu.addr, spark, work, f"flow{i}", source)))
            latency = asyncio.run(run_latency(spu.addr, spark, work, source))
            spark.stop()
    flow_rate = EVENTS / statistics.median(flow)
    bridge_rate = EVENTS / statistics.median(bridge)
    result = {
        "benchmark": "flows",
        "events": EVENTS,
        "event_bytes": round(source_bytes(lines) / EVENTS),
        "repeats": REPEATS,
        "flow_events_per_s": round(flow_rate),
        "bridge_passthrough_events_per_s": round(bridge_rate),
        "ratio_flow_to_bridge": round(flow_rate / bridge_rate, 3),
        "flow_seconds": [round(s, 2) for s in flow],
        "bridge_seconds": [round(s, 2) for s in bridge],
        "latency_rate_events_per_s": LATENCY_RATE,
        "latency": {
            k: latency.get(k) for k in sorted(latency) if "latency" in k or k in ("events", "events_per_s")
        },
    }
    sys.stdout.write(json.dumps(result) + "\n")


def source_bytes(lines: list[bytes]) -> int:
    return sum(len(line) + 1 for line in lines)


if __name__ == "__main__":
    main()
