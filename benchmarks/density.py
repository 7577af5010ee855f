"""Density: 20 flows in one runtime, each paused and resumed on its own; memory and idle CPU per flow.

Each flow is `metronome (1 event/s) -> select event from in into out -> null`:
a Spark query with the runtime's default trigger (kept a query, `route_in_log = 0`:
aliased, the pipeline would run nothing), two channels, a monitor.

- baseline, same run: the runtime with its SPU and Spark session and no flow,
  memory (PSS of this process, the Spark JVM and its Python workers) and CPU
  over an idle window;
- figure: the same with 20 flows deployed, per flow (total minus baseline,
  divided by 20);
- independence: every flow is paused in turn (its metronome stops counting,
  the others go on) and resumed (it counts again).

Prints one JSON object. Run: PYTHONPATH=src python benchmarks/density.py [flows] [idle_s]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from contraflow.runtime.runtime import Runtime

FLOWS = 20
IDLE_S = 10.0
TICKS = os.sysconf("SC_CLK_TCK")

KEPT_QUERY = 'pipelines = {"pass": {"route_in_log": 0}}'  # the flow args that keep `pass` a query
FLOW = """
define flow idle
{args}flow
  define connector ticks from metronome with config = {"interval": 1000000000} end;
  define connector drop from null end;
  define pipeline pass pipeline select event from in into out; end;
  create connector ticks;
  create connector output from drop;
  create pipeline pass;
  connect /connector/ticks to /pipeline/pass;
  connect /pipeline/pass to /connector/output;
end;
"""


def process_tree(root: int) -> list[int]:
    """`root` and every process below it (the Spark JVM, its Python workers)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, todo = [root], [root]
    while todo:
        pid = todo.pop()
        children = [child for child, parent in parents.items() if parent == pid]
        tree += children
        todo += children
    return tree


def pss_bytes(pid: int) -> int:
    """The process's proportional share of the pages it maps (each shared page divided among the
    processes sharing it); OSError once the process is gone."""
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    return next((int(line.split()[1]) * 1024 for line in rollup.splitlines() if line.startswith("Pss:")), 0)


def usage(pids: list[int]) -> tuple[int, float]:
    """(proportional set size in bytes, CPU seconds) summed over `pids` (gone meanwhile: 0).

    PSS, not RSS: Spark's Python workers are forked from one daemon and share
    most of their pages, which RSS would count once per worker."""
    pss, cpu = 0, 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            pss += pss_bytes(pid)
        except (OSError, IndexError):
            continue
        cpu += (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime
    return pss, cpu


async def idle_window(seconds: float) -> dict[str, float]:
    """Memory (PSS) at the end and CPU (cores busy) over `seconds` of this process tree."""
    pids = process_tree(os.getpid())
    _, cpu_before = usage(pids)
    began = time.monotonic()
    await asyncio.sleep(seconds)
    pids = process_tree(os.getpid())
    pss, cpu_after = usage(pids)
    return {"pss_mb": pss / 2**20, "cpu_cores": (cpu_after - cpu_before) / (time.monotonic() - began)}


def ticks(runtime: Runtime, flow: str) -> int:
    return runtime.flows[flow].connectors["ticks"].ctx.metrics.by_port.get("out", [0])[0]


async def independent(runtime: Runtime, flows: list[str]) -> list[str]:
    """Pause each flow in turn: it must stop counting while every other flow goes on, and count
    again once resumed. Returns what went wrong (nothing: independent)."""
    problems = []
    for flow in flows:
        await runtime.set_flow_status(flow, "paused")
        await asyncio.sleep(1.2)  # a metronome pull under way waits up to its 1 s tick, then completes
        before = {f: ticks(runtime, f) for f in flows}
        await asyncio.sleep(2.0)
        after = {f: ticks(runtime, f) for f in flows}
        if after[flow] != before[flow] or runtime.flows[flow].state != "paused":
            problems.append(f"{flow} counted {after[flow] - before[flow]} events while paused")
        stalled = [f for f in flows if f != flow and after[f] == before[f]]
        if stalled:
            problems.append(f"while {flow} was paused, {stalled} counted nothing")
        await runtime.set_flow_status(flow, "running")
        resumed = ticks(runtime, flow)
        await asyncio.sleep(1.5)
        if ticks(runtime, flow) == resumed:
            problems.append(f"{flow} counted nothing after resuming")
    return problems


Independence = Callable[[Runtime, list[str]], Awaitable[list[str]]]
Deployment = Callable[[Runtime, str, list[str]], Awaitable[None]]


async def deploy_all(runtime: Runtime, definition: str, names: list[str]) -> None:
    """Every flow in one deployment, as a file of 20 `deploy flow` statements would."""
    await runtime.deploy(definition + "".join(f"deploy flow {n} from idle;\n" for n in names), "<density>")


async def measure(
    spu_addr: str,
    spark: Any,
    data_dir: Path,
    count: int,
    idle_s: float,
    check: Independence = independent,
    prefix: str = "idle",
    flow_args: str = KEPT_QUERY,
    deploy: Deployment = deploy_all,
) -> dict[str, Any]:
    """Deploy `count` flows (ids `prefix0`..., with `deploy`) into a new runtime and measure them
    against the same runtime before; `check` tells whether they pause and resume independently;
    `flow_args` are Troy `args` of the flows (reserved settings)."""
    runtime = Runtime(spu_addr, spark, data_dir)
    await asyncio.sleep(2)  # the SPU and Spark settle after start-up
    baseline = await idle_window(idle_s)
    names = [f"{prefix}{n}" for n in range(count)]
    began = time.monotonic()
    await deploy(runtime, FLOW.replace("{args}", f"args\n  {flow_args}\n" if flow_args else ""), names)
    deploy_s = time.monotonic() - began
    try:
        while min(ticks(runtime, n) for n in names) == 0:
            await asyncio.sleep(0.2)
        loaded = await idle_window(idle_s)
        separate = await check(runtime, names)
    finally:
        await runtime.quiesce_all(shutdown=False)
    per_flow_mb = (loaded["pss_mb"] - baseline["pss_mb"]) / count
    per_flow_cpu = (loaded["cpu_cores"] - baseline["cpu_cores"]) / count
    return {
        "benchmark": "density",
        "flows": count,
        "deploy_s": round(deploy_s, 1),
        "figure": {
            "memory_per_flow_mb": round(per_flow_mb, 1),
            "idle_cpu_per_flow_percent_of_a_core": round(100 * per_flow_cpu, 2),
            "total_pss_mb": round(loaded["pss_mb"]),
            "total_cpu_cores": round(loaded["cpu_cores"], 3),
        },
        "baseline": {
            "runtime_without_flows_pss_mb": round(baseline["pss_mb"]),
            "cpu_cores": round(baseline["cpu_cores"], 3),
        },
        "ratio": {
            "memory_with_flows_over_without": round(loaded["pss_mb"] / baseline["pss_mb"], 2),
            "cpu_with_flows_over_without": round(loaded["cpu_cores"] / max(baseline["cpu_cores"], 1e-3), 1),
        },
        "pause_resume_independent": not separate,
        "pause_resume_problems": separate,
    }


async def main(count: int, idle_s: float) -> dict[str, Any]:
    from contraflow.spark.session import session
    from contraflow.spu.embedded import EmbeddedSpu

    with tempfile.TemporaryDirectory(prefix="contraflow-density-") as tmp:
        root = Path(tmp)
        with EmbeddedSpu(root / "spu", mode="thread") as spu:
            spark = session(data_dir=root / "spark")
            try:
                return await measure(spu.addr, spark, root / "data", count, idle_s)
            finally:
                spark.stop()


if __name__ == "__main__":
    flows = int(sys.argv[1]) if len(sys.argv) > 1 else FLOWS
    idle = float(sys.argv[2]) if len(sys.argv) > 2 else IDLE_S
    print(json.dumps(asyncio.run(main(flows, idle))))
