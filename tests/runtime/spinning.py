"""A flow whose pipeline's micro-batch really runs in Spark for as long as a test wants.

The `spin` pipeline matches `^(a+)+$` against its `subject` arg for every
event: `"ab"` answers at once, `SPIN` (40 `a`s and a `b`) backtracks for
longer than any test runs, in C, inside one of Spark's Python workers. The
same flow redeployed with `"ab"` then processes the same input quickly, which
is how a test shows the input survived. Both subjects let every event through.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.density import process_tree

from contraflow.runtime.runtime import Runtime
from tests.runtime.harness import troy, wait_for

SPIN = "a" * 40 + "b"
QUICK = "ab"
TICKS = os.sysconf("SC_CLK_TCK")


def spinning_flow(fid: str, source: Path, output: Path, subject: str, ceiling_s: float) -> str:
    """`source` (json lines) -> spin -> `output`, with `subject` and the undeploy `ceiling_s`."""
    return troy(
        fid,
        f"""
  define pipeline spin
  args subject = "{QUICK}"
  pipeline
    select event from in where not re::is_match("^(a+)+$", args.subject) into out;
  end;
  create connector input from lines with path = "{source}" end;
  create connector output from lines with path = "{output}", mode = "truncate" end;
  create pipeline spin with subject = args.subject end;
  connect /connector/input to /pipeline/spin;
  connect /pipeline/spin to /connector/output;
""",
        args=f'subject = "{subject}", cancel = {{"ceiling_s": {ceiling_s}}}',
    )


def running_jobs(spark: Any, run_id: str) -> list[int]:
    """Ids of the Spark jobs of the query run `run_id` (its job group) that are still running."""
    tracker = spark.sparkContext.statusTracker()
    infos = [tracker.getJobInfo(job) for job in tracker.getJobIdsForGroup(run_id)]
    return [info.jobId for info in infos if info is not None and info.status == "RUNNING"]


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of `pid` so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def alive(pid: int) -> bool:
    """`pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def python_workers() -> list[int]:
    """Spark's Python worker processes below this test process."""
    workers = []
    for pid in process_tree(os.getpid()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"pyspark" in command and b"java" not in command.split(b"\0", 1)[0]:
            workers.append(pid)
    return workers


async def spinning_worker(runtime: Runtime, spark: Any, fid: str) -> int:
    """Wait until the flow's `spin` batch is running in Spark; the pid of the Python worker that
    spins (the one that used most CPU over a second, at least a fifth of it)."""
    flow = runtime.flows[fid]
    await wait_for(lambda: "spin" in flow.pipelines, what="the pipeline query")
    run = flow.pipelines["spin"]
    await wait_for(lambda: bool(running_jobs(spark, run.run_id)), 120, "the spinning batch's job")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        before = {pid: cpu_seconds(pid) for pid in python_workers()}
        await asyncio.sleep(1.0)
        used = {pid: cpu_seconds(pid) - spent for pid, spent in before.items()}
        busiest = max(used, key=used.__getitem__, default=None)
        if busiest is not None and used[busiest] > 0.2:
            return busiest
    raise AssertionError(f"no Python worker of {fid} spins: {python_workers()}")
