"""A flow whose pipeline's micro-batch really runs in Spark for as long as a test wants.

The `spin` pipeline matches `^(a+)+$` against its `subject` arg for every
event: `"ab"` answers at once, `SPIN` (31 `a`s and a `b`) backtracks for
minutes per event (each `a` doubles it: 24 took 1.8 s on the loaded box), in
C, inside one of Spark's Python workers: longer than any test waits, yet a
worker a failed test leaves behind stops by itself. The same flow redeployed
with `"ab"` then processes the same input quickly, which is how a test shows
the input survived. Both subjects let every event through.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

from contraflow.runtime.runtime import Runtime
from tests.runtime.harness import troy, wait_for

SPIN = "a" * 31 + "b"
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
    """Spark's Python worker processes of this test run's session. Spark's launcher detaches
    them (their parent is init), so they are known by the session's own worker launcher in
    their environment (`contraflow.spark.session` sets $PYSPARK_PYTHON). Those forked from the
    pre-started Python (`contraflow.spark.prestart`) show its command line."""
    marker = f"PYSPARK_PYTHON={os.environ['PYSPARK_PYTHON']}".encode()
    workers = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
            environment = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        program, _, arguments = command.partition(b"\0")
        spark_python = b"pyspark" in arguments or b"contraflow.spark.prestart" in arguments
        if b"python" in program and spark_python and marker in environment:  # not the JVM
            workers.append(int(entry))
    return workers


async def spinning_worker(runtime: Runtime, spark: Any, fid: str) -> int:
    """Wait until the flow's `spin` batch is running in Spark; the pid of the Python worker that
    spins: over two seconds it used the most CPU, three times any other worker's (a share of a
    core on a loaded box, next to nothing for the idle ones)."""
    flow = runtime.flows[fid]
    await wait_for(lambda: "spin" in flow.pipelines, what="the pipeline query")
    run = flow.pipelines["spin"]
    await wait_for(lambda: bool(running_jobs(spark, run.run_id)), 120, "the spinning batch's job")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        before = {pid: cpu_seconds(pid) for pid in python_workers()}
        await asyncio.sleep(2.0)
        used = sorted(((cpu_seconds(pid) - spent, pid) for pid, spent in before.items()), reverse=True)
        if used and used[0][0] >= 0.05 and (len(used) == 1 or used[0][0] >= 3 * used[1][0]):
            return used[0][1]
    raise AssertionError(f"no Python worker of {fid} spins: {python_workers()}")


def kill(pid: int) -> None:
    """SIGKILL `pid` if it still runs (a spinning worker a failing test would leave behind)."""
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
