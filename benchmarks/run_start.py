"""How long `contraflow run` takes to the first event delivered, for a flow that runs no Spark query.

The flow: metronome -> `select event from in into out` -> file. Its pipeline only routes, so it
runs aliased (no query); before Spark started on demand, `contraflow run` still waited for Spark
to start before deploying it. Measured from starting the command (a new process, a new data
directory) until the sink's file holds a line, REPEATS times, the cases interleaved so that load
on the box hits them alike:

- figure: this checkout, the flow as written (aliased);
- baseline: the same command and flow on the sources under `--baseline-src` (e.g. main's
  `src`, from `git archive`), which waits for Spark first; without it, the same flow kept a Spark
  query (`route_in_log = 0`) on this checkout, what a flow that needs Spark waits;
- `query_s`: the flow kept a query on this checkout, for reference (Spark's start, then the
  query's), and `baseline_query_s` the same on the baseline's sources: what a flow that needs Spark
  waits, before and after.

Prints one JSON object: medians in seconds, the load average before and after, and the ratio.
Run: PYTHONPATH=src .venv/bin/python benchmarks/run_start.py [--repeats N] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from startup import first_line_in

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 3
TIMEOUT_S = 300.0
FLOW = """
define flow ticks
{args}flow
  define connector ticks from metronome with config = {{"interval": 100000000}} end;
  define connector out from file
  with codec = "json", postprocessors = ["separate"], config = {{"path": "out.jsonl", "mode": "append"}} end;
  define pipeline pass pipeline select event from in into out; end;
  create connector ticks;
  create connector out;
  create pipeline pass;
  connect /connector/ticks to /pipeline/pass;
  connect /pipeline/pass to /connector/out;
end;
deploy flow ticks;
"""
KEPT_QUERY = 'args\n  pipelines = {"pass": {"route_in_log": 0}}\n'


def first_event_s(src: Path, query: bool) -> float:
    """Seconds from `contraflow run` (its code from `src`) to the first event in the sink; then the
    run's process group is killed (its stop is not what is measured)."""
    with tempfile.TemporaryDirectory(prefix="run-start-") as tmp:
        work = Path(tmp)
        (work / "flow.troy").write_text(FLOW.format(args=KEPT_QUERY if query else ""))
        args = [sys.executable, "-m", "contraflow", "run", "flow.troy", "--no-api", "--no-status"]
        args += ["--spu-port", "0", "--data-dir", str(work / "data")]
        done = first_line_in(work, "out.jsonl")
        start = time.perf_counter()
        process = subprocess.Popen(
            args,
            cwd=work,
            env=os.environ | {"PYTHONPATH": str(src)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            while not done():
                if process.poll() is not None or time.perf_counter() - start > TIMEOUT_S:
                    raise RuntimeError(f"no event from {args} ({process.poll()})")
                time.sleep(0.02)
            return time.perf_counter() - start
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--baseline-src", type=Path, default=None)
    options = parser.parse_args()
    here = ROOT / "src"
    cases: dict[str, Callable[[], float]] = {
        "aliased_s": lambda: first_event_s(here, query=False),
        "query_s": lambda: first_event_s(here, query=True),
    }
    if options.baseline_src is not None:
        base = options.baseline_src.resolve()
        cases["baseline_s"] = lambda: first_event_s(base, query=False)
        cases["baseline_query_s"] = lambda: first_event_s(base, query=True)
    load_before = os.getloadavg()
    first_event_s(here, query=True)  # untimed: the page cache and the JVM's class-data archive
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(options.repeats):
        for name, case in cases.items():
            times[name].append(case())
    medians = {name: round(statistics.median(values), 2) for name, values in times.items()}
    baseline = medians.get("baseline_s", medians["query_s"])
    print(
        json.dumps(
            {
                "figure": "seconds from `contraflow run` to the first event delivered, aliased flow",
                "aliased_s": medians["aliased_s"],
                "baseline": "main's sources (--baseline-src)"
                if options.baseline_src
                else "this checkout, the pipeline kept a Spark query",
                "baseline_s": baseline,
                "ratio": round(medians["aliased_s"] / baseline, 3),
                "query_s": medians["query_s"],
                "baseline_query_s": medians.get("baseline_query_s"),
                "runs_s": {name: [round(t, 2) for t in values] for name, values in times.items()},
                "load_average": {"before": load_before, "after": os.getloadavg()},
            }
        )
    )


if __name__ == "__main__":
    main()
