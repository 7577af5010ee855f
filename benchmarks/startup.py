"""Start-up benchmark: how long a newcomer waits for the first output.

Three commands, each started cold (a new process, a new data directory),
REPEATS times, interleaved so that load on the box hits them alike:

- `contraflow run examples/classify/flow.troy` (in a copy of the example's
  layout) until the first line lands in `out/classified.jsonl`;
- `contraflow query` on the classify example's pipeline with 5 events until
  its first line on standard output;
- the baseline: a bare PySpark script that starts a session and runs one
  Structured Streaming query with the `availableNow` trigger reading a small
  JSON file into a JSON file, until the first line of that file.

One untimed round first warms the page cache for all three alike and lets
contraflow build what it caches across runs (the JVM class-data archive of
contraflow.spark.class_cache, adopted once settled): the timed rounds are
what every run after the first one sees.
Prints one JSON object: medians in seconds and each ratio to the baseline
(target: at most 1.5).

Run: .venv/bin/python benchmarks/startup.py [--repeats N]
"""

from __future__ import annotations

import argparse
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "classify"
REPEATS = 3
TIMEOUT_S = 240.0
TARGET_RATIO = 1.5
GROUP_EXIT_S = 90.0

BARE_PYSPARK = """
import sys
from pyspark.sql import SparkSession

source, sink, checkpoint = sys.argv[1:4]
spark = SparkSession.builder.master("local[*]").getOrCreate()
schema = "level STRING, service STRING, status INT, message STRING"
query = (
    spark.readStream.schema(schema).json(source)
    .writeStream.format("json").option("path", sink).option("checkpointLocation", checkpoint)
    .trigger(availableNow=True).start()
)
query.awaitTermination()
spark.stop()
"""


def first_line_in(directory: Path, pattern: str) -> Callable[[], bool]:
    """True once any file matching `pattern` under `directory` holds a complete line."""

    def check() -> bool:
        for path in directory.glob(pattern):
            try:
                if b"\n" in path.read_bytes():
                    return True
            except OSError:
                continue
        return False

    return check


def time_until(args: list[str], cwd: Path, done: Callable[[], bool], stdin: bytes | None = None) -> float:
    """Seconds from starting `args` until `done()`; the process group is stopped afterwards."""
    start = time.perf_counter()
    process = subprocess.Popen(
        args,
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert process.stdin is not None
    process.stdin.write(stdin or b"")
    process.stdin.close()
    try:
        while not done():
            if time.perf_counter() - start > TIMEOUT_S:
                raise TimeoutError(f"no output from {args} in {TIMEOUT_S} s")
            if process.poll() is not None and not done():
                raise RuntimeError(f"{args} exited ({process.returncode}) before any output")
            time.sleep(0.05)
        return time.perf_counter() - start
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the command, then give its group (Spark's JVM, which writes the class-data
    archive as it exits) time to end by itself before SIGKILL takes what is left."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(60)
    deadline = time.monotonic() + GROUP_EXIT_S
    while time.monotonic() < deadline and group_alive(process.pid):
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def contraflow_run(work: Path) -> float:
    example = work / "examples" / "classify"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("out"))
    args = [
        sys.executable,
        "-m",
        "contraflow",
        "run",
        "examples/classify/flow.troy",
        "--no-api",
        "--spu-port",
        "0",
    ]
    args += ["--data-dir", str(work / "data")]
    return time_until(args, work, first_line_in(example / "out", "classified.jsonl"))


def contraflow_query(work: Path) -> float:
    events = (EXAMPLE / "sample.jsonl").read_bytes().splitlines()[:5]
    stdout_lines: list[bytes] = []
    args = [sys.executable, "-m", "contraflow", "query", str(EXAMPLE / "pipeline.trickle")]
    start = time.perf_counter()
    process = subprocess.Popen(
        args,
        cwd=work,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b"\n".join(events) + b"\n")
    process.stdin.close()
    try:
        line = process.stdout.readline()
        elapsed = time.perf_counter() - start
        if not line:
            raise RuntimeError(f"{args} printed nothing (exit {process.wait()})")
        stdout_lines.append(line)
        return elapsed
    finally:
        stop(process)


def bare_pyspark(work: Path) -> float:
    source = work / "in"
    source.mkdir()
    lines = (EXAMPLE / "sample.jsonl").read_bytes().splitlines()[:5]
    (source / "events.json").write_bytes(b"\n".join(lines) + b"\n")
    script = work / "bare.py"
    script.write_text(BARE_PYSPARK)
    args = [sys.executable, str(script), str(source), str(work / "out"), str(work / "checkpoint")]
    return time_until(args, work, first_line_in(work / "out", "part-*.json"))


CASES: dict[str, Callable[[Path], float]] = {
    "bare_pyspark_s": bare_pyspark,
    "run_first_output_s": contraflow_run,
    "query_first_output_s": contraflow_query,
}


def wait_for_class_archive(timeout_s: float = 300.0) -> bool:
    """After the warm-up: until the class-data archive the first run wrote has settled (or none is made)."""
    from contraflow.spark.class_cache import SETTLED_S, cache_dir

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        written = list(cache_dir().glob("spark-*.jsa"))
        if not written or any(time.time() - p.stat().st_mtime > SETTLED_S for p in written):
            return bool(written)
        time.sleep(1.0)
    return False


def measure(repeats: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in CASES}
    for round_no in range(repeats + 1):
        if round_no == 1:
            wait_for_class_archive()
        for name, case in CASES.items():
            with tempfile.TemporaryDirectory(prefix="contraflow-startup-") as tmp:
                seconds = case(Path(tmp))
            if round_no:  # round 0 warms caches for all three alike
                samples[name].append(round(seconds, 2))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS)
    repeats = parser.parse_args().repeats
    env_src = str(ROOT / "src")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [env_src, os.environ.get("PYTHONPATH")]))
    samples = measure(repeats)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    baseline = medians["bare_pyspark_s"]
    result = {
        "figure": "seconds from start to first output line (median of cold starts)",
        **medians,
        "run_ratio": round(medians["run_first_output_s"] / baseline, 2),
        "query_ratio": round(medians["query_first_output_s"] / baseline, 2),
        "target_ratio": TARGET_RATIO,
        "samples": samples,
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
