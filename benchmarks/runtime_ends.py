"""The runtime process's CPU per event on `hot_path.py`'s passthrough flow, against a baseline tree.

Prints one JSON object. Usage:
    python benchmarks/runtime_ends.py [EVENTS] [--baseline=SRC] [--rounds=N]

`figure` is the median CPU µs per event of the runtime process (its asyncio
loop with the connectors, the embedded SPU thread, the py4j threads) in the
passthrough flow's steady state, as `hot_path.run_flow` measures it; with
`--baseline=SRC` (the `src` directory of another checkout, e.g. a worktree at
the commit before a change) the same flow runs with that code too, rounds
alternating between the two so both see the same load, and `baseline` and
`ratio` (figure / baseline: below 1 is less CPU) are that side's. Rates and
every process kind's CPU per event come along per run.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hot_path  # noqa: E402 - the flow, events and measurement are hot_path's own

OWN_SRC = Path(__file__).resolve().parents[1] / "src"


def option(name: str, default: str) -> str:
    return next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith(f"--{name}=")), default)


def passthrough(src: Path, source: Path, work: Path, count: int) -> dict[str, Any]:
    """One passthrough run with the code under `src` (the child `contraflow run` imports it first)."""
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(src)
    try:
        run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=work))
        result = hot_path.run_flow("passthrough", hot_path.PASSTHROUGH, source, run_dir, count)
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous
    shutil.rmtree(run_dir, ignore_errors=True)
    return {
        "events_per_s": result["events_per_s"],
        "cpu_us_per_event": result["cpu_us_per_event"],
        "stage_wall_us_per_event": result["stage_wall_us_per_event"],
    }


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    count = int(args[0]) if args else 1_000_000
    baseline = option("baseline", "")
    rounds = int(option("rounds", "1"))
    sides = {"figure": OWN_SRC} | ({"baseline": Path(baseline).resolve()} if baseline else {})
    work = Path(tempfile.mkdtemp(prefix="bench-runtime-ends-"))
    try:
        source = work / "events.jsonl"
        hot_path.make_events(source, count)
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        for _ in range(rounds):
            for side, src in sides.items():
                runs[side].append(passthrough(src, source, work, count))
        result: dict[str, Any] = {"events": count, "rounds": rounds}
        for side in sides:
            result[side] = statistics.median(r["cpu_us_per_event"]["runtime"] for r in runs[side])
        if baseline:
            result["ratio"] = round(result["figure"] / result["baseline"], 3)
        result["runs"] = runs
        result["load_average"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
