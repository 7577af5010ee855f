"""Two flows over the same backlog, one `critical` and one `background`: throughput while both run.

Each flow's input channel holds the same backlog of JSON events before it
starts (appended to its channel topic up front: the race is between the
pipelines, where priorities act through FAIR pools and admission); its
`null` source adds nothing, its `select event from in into out` pipeline
feeds a `null` sink (channels of 50k events, so a critical batch is at most 50k
while a background one is admitted 5k). The pipeline only routes, so it is kept a Spark query
(`route_in_log = 0`): the race is between queries sharing Spark; aliased (`runtime.aliases`),
its sink would read the backlog itself, with no batch to admit. Both are deployed together; throughput is the rate at
which each pipeline appends to its output channel over a window in which both
still have input left.

Throughput is measured from the moment both queries run until the first of
them has read its whole backlog (or the window ends): each flow's output
events over that time. A channel's end offset moves once per committed
micro-batch, so the window spans several batches.

- figure: critical / background throughput;
- baseline, same run and data: the same two flows both at `normal` (the
  ratio fairness alone gives, about 1);
- ratio = figure / baseline. Neither flow may starve: both rates > 0.

Prints one JSON object. Run: PYTHONPATH=src python benchmarks/priority.py [events] [window_s]
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from contraflow.pipeline.spark.listener import records_read
from contraflow.runtime.channels import channel_topic
from contraflow.runtime.runtime import Runtime
from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.protocol.topics import TopicConfig

EVENTS = 600_000
WINDOW_S = 60.0
_RUNS = itertools.count()

FLOW = """
define flow race
args
  priority = "normal",
  pipelines = {{"pass": {{"route_in_log": 0}}}},
  channels = {{"default": {{"capacity": 50000}}}},
  cancel = {{"ceiling_s": 5}}
flow
  define connector nothing from null end;
  define pipeline pass pipeline select event from in into out; end;
  create connector input from nothing;
  create connector output from nothing;
  create pipeline pass;
  connect /connector/input to /pipeline/pass;
  connect /pipeline/pass to /connector/output;
end;
deploy flow {first} from race with priority = "{first_priority}" end;
deploy flow {second} from race with priority = "{second_priority}" end;
"""


async def fill_backlog(spu_addr: str, topic: str, count: int) -> None:
    """Append `count` JSON events of about 50 bytes to the channel topic `topic`."""
    async with AsyncSpuClient(spu_addr) as client:
        await client.create_topic(topic, TopicConfig(partitions=1))
        for start in range(0, count, 10_000):
            values = [
                orjson.dumps({"id": i, "service": "billing", "msg": "ok"})
                for i in range(start, min(count, start + 10_000))
            ]
            await client.produce(topic, 0, values)


def _out(runtime: Runtime, flow: str) -> int:
    monitor = runtime.flows[flow].monitor
    return monitor.states[channel_topic(flow, "pass", "out")].end if monitor is not None else 0


def _largest_batch(runtime: Runtime, flow: str) -> int:
    """The most records one micro-batch of the flow's pipeline read (its last 100 batches)."""
    query = runtime.flows[flow].pipelines["pass"].query
    return max((records_read(s) for p in query.recentProgress for s in p.sources), default=0)


async def race(
    spu_addr: str,
    spark: Any,
    data_dir: Path,
    events: int,
    priorities: tuple[str, str],
    window_s: float,
) -> dict[str, Any]:
    """Deploy both flows (in that order) and measure both output rates from then until one of them
    has read its whole backlog or `window_s` passed; returns rates, events out and the largest
    micro-batch by priority."""
    run = next(_RUNS)
    first, second = f"race{run}a", f"race{run}b"
    source = FLOW.format(
        first=first, second=second, first_priority=priorities[0], second_priority=priorities[1]
    )
    for flow in (first, second):
        await fill_backlog(spu_addr, channel_topic(flow, "input", "out"), events)
    runtime = Runtime(spu_addr, spark, data_dir)
    await runtime.deploy(source, "<priority race>")
    try:
        began = time.monotonic()
        now = {first: 0, second: 0}
        while time.monotonic() - began < window_s and max(now.values()) < events:
            await asyncio.sleep(0.05)
            now = {first: _out(runtime, first), second: _out(runtime, second)}
        took = time.monotonic() - began
        largest = {f: _largest_batch(runtime, f) for f in (first, second)}
    finally:
        await runtime.quiesce_all(shutdown=False)
    rates = [now[f] / took for f in (first, second)]
    labels = {first: f"{priorities[0]} ({first})", second: f"{priorities[1]} ({second})"}
    return {
        "window_s": round(took, 2),
        "events_per_s": {labels[f]: round(rate) for f, rate in zip((first, second), rates, strict=True)},
        "events_out": {labels[f]: now[f] for f in (first, second)},  # at the window's end
        "largest_batch": {labels[f]: largest[f] for f in (first, second)},
        "ratio": rates[0] / rates[1] if rates[1] else float("inf"),
        "starved": min(rates) == 0,
    }


async def main(events: int, window_s: float) -> dict[str, Any]:
    from contraflow.spark.session import session
    from contraflow.spu.embedded import EmbeddedSpu

    with tempfile.TemporaryDirectory(prefix="contraflow-priority-") as tmp:
        root = Path(tmp)
        with EmbeddedSpu(root / "spu", mode="thread") as spu:
            spark = session(data_dir=root / "spark")
            try:
                baseline = await race(spu.addr, spark, root / "b", events, ("normal", "normal"), window_s)
                figure = await race(spu.addr, spark, root / "f", events, ("critical", "background"), window_s)
            finally:
                spark.stop()
    return {
        "benchmark": "priority",
        "events": events,
        "figure": {"critical_over_background": round(figure["ratio"], 2), **figure},
        "baseline": {"normal_over_normal": round(baseline["ratio"], 2), **baseline},
        "ratio": round(figure["ratio"] / baseline["ratio"], 2) if baseline["ratio"] else None,
        "neither_starved": not figure["starved"] and not baseline["starved"],
    }


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else EVENTS
    window = float(sys.argv[2]) if len(sys.argv) > 2 else WINDOW_S
    print(json.dumps(asyncio.run(main(count, window))))
