"""The runtime process's CPU per event on `hot_path.py`'s passthrough flow, against a baseline tree.

Prints one JSON object. Usage:
    python benchmarks/runtime_ends.py [EVENTS] [--baseline=SRC] [--rounds=N]

`figure` is the median CPU µs per event of the runtime process (its asyncio
loop with the connectors, the embedded SPU thread, the py4j threads) over
the passthrough flow's whole stream: from the first event the source
appended to the last one the sink delivered. (`hot_path.py`'s steady-state
window starts at a third of the events delivered; with the channels holding
1M events the source has often read the whole file by then, so that window
sees the sink side only.) With
`--baseline=SRC` (the `src` directory of another checkout, e.g. a worktree at
the commit before a change) the same flow runs with that code too, rounds
alternating between the two so both see the same load, and `baseline` and
`ratio` (figure / baseline: below 1 is less CPU) are that side's. Rates and
every process kind's CPU per event come along per run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hot_path  # noqa: E402 - the flow, events and measurement are hot_path's own

OWN_SRC = Path(__file__).resolve().parents[1] / "src"


def option(name: str, default: str) -> str:
    return next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith(f"--{name}=")), default)


def passthrough(src: Path, source: Path, work: Path, count: int) -> dict[str, Any]:
    """One passthrough run with the code under `src` (the child `contraflow run` imports it first)."""
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    sink, troy = run_dir / "out.jsonl", run_dir / "flow.troy"
    troy.write_text(
        f"define flow passthrough\nflow\n{hot_path.PASSTHROUGH}"
        f"{hot_path.SOURCE.format(source=source, sink=sink)}end;\ndeploy flow passthrough;\n"
    )
    api = f"127.0.0.1:{hot_path.free_port()}"
    command = [sys.executable, "-m", "contraflow", "run", str(troy), "--data-dir", str(run_dir / "data")]
    command += ["--api", api, "--no-status", "--spu-port", "0"]
    with (run_dir / "run.log").open("wb") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=os.environ | {"PYTHONPATH": str(src)},
        )
        try:
            result = measure(process, api, count)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if sink.stat().st_size != source.stat().st_size:
        raise RuntimeError(f"the sink wrote {sink.stat().st_size} bytes of {source.stat().st_size}")
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def measure(process: subprocess.Popen[bytes], api: str, count: int) -> dict[str, Any]:
    """CPU per event by process kind and runtime stage seconds per event, from the source's first
    append to the sink's last delivery."""
    start: tuple[float, dict[str, float], dict[str, float]] | None = None
    started = time.perf_counter()
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"contraflow run exited with {process.returncode}")
        if time.perf_counter() - started > hot_path.TIMEOUT_S:
            raise RuntimeError("the flow did not finish in time")
        time.sleep(0.05 if start is None else hot_path.SAMPLE_S)
        with contextlib.suppress(httpx.HTTPError):
            metrics = hot_path.read_metrics(api)
            read, delivered = (
                events(metrics, alias, port) for alias, port in (("input", "out"), ("output", "in"))
            )
            if start is None and read > 0:
                start = (time.perf_counter(), hot_path.cpu_by_kind(process.pid), stages(metrics))
            if start is not None and delivered >= count:
                end = (time.perf_counter(), hot_path.cpu_by_kind(process.pid), stages(metrics))
                break
    assert start is not None
    (t0, cpu0, stages0), (t1, cpu1, stages1) = start, end
    return {
        "events_per_s": round(count / (t1 - t0)),
        "cpu_us_per_event": {k: round((cpu1[k] - cpu0.get(k, 0)) / count * 1e6, 3) for k in sorted(cpu1)},
        "stage_us_per_event": {k: round((stages1[k] - stages0.get(k, 0)) / count * 1e6, 3) for k in stages1},
    }


def events(metrics: list[tuple[str, dict[str, str], float]], alias: str, port: str) -> float:
    """Events a connector's port passed so far (`contraflow_connector_events_total`)."""
    return sum(
        value
        for name, labels, value in metrics
        if name == "contraflow_connector_events_total"
        and labels.get("connector") == alias
        and labels.get("port") == port
    )


def stages(metrics: list[tuple[str, dict[str, str], float]]) -> dict[str, float]:
    """The runtime's own stage seconds so far (source read, decode, append, sink write and commit)."""
    found = hot_path.stage_seconds(metrics)
    return {k: v for k, v in found.items() if not k.startswith("spark_")}


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
