"""Whole flows through `contraflow run` against the per-core Python ceiling and plain PySpark.

Prints one JSON object. Usage: python benchmarks/hot_path.py [EVENTS] [--only=python,pyspark,columnar,passthrough,w1,spu]
(default: all but `spu`, the side-by-side run of the embedded SPU as a thread and as a child process).

Input: EVENTS JSON lines of about 200 bytes (`ts` in ms, `user_id`, `event`,
`value` 0-100, `country`, `session`, `ua`), written once to a temporary file.

- `passthrough`: `contraflow run` (embedded SPU, local Spark, REST API on
  loopback, durable channels, acks on) of file (json, separate) ->
  `select event from in into out` -> file;
- `w1`: the same source -> keep `event == "click" or value >= 50` -> a script
  setting `$region` from `country` -> `select {"region": group[0], "count":
  aggr::stats::count()}` over a 10 s tumbling window on event time grouped by
  region -> file;
- `python`: the same work as a plain loop (read lines, orjson, filter, count
  per region and window in a dict): the per-core ceiling;
- `pyspark`: the same work as a plain Structured Streaming query (JVM JSON
  reader with a schema, `availableNow`, noop sink), rate = events offered (the
  lines of the files each batch read, from the file source's log; its
  `numInputRows` counts only the rows left after the scan's pushed-down
  filter, kept as `rows_after_pushed_filter_per_s`) / execution time of its
  micro-batches after the first (start-up left out), run in a child process so
  its JVM is gone before the flows run;
- `columnar`: the same work in polars and in pyarrow.compute, one thread
  each, in 4 MiB chunks of lines (what one read task parses at a time), partial
  counts merged at the end: the per-core ceiling of columnar execution. Each
  flow also gets its ratio to each engine's rate.

A flow's rate is its steady state: the time its counter (events delivered by
the sink for passthrough, events read by the pipeline for w1, both from
`/metrics`) takes from EVENTS/3 to EVENTS. Over the same span each process
of the runtime's tree is sampled for CPU, giving CPU µs per event per process
kind (runtime with its embedded SPU, JVM, Spark's Python workers), and the
stage counters (`contraflow_stage_seconds`: source read + split, decode,
append, sink write, sink commit, the monitor that settles acks; Spark's
micro-batch durations and their phases `spark_offsets`, `spark_planning`,
`spark_execution`, `spark_commit`, `spark_state_commit`, from
`contraflow_pipeline_batch_phase_seconds`) give wall µs per event in each stage. Stages overlap
(they run concurrently), so they do not add up to 1 / rate. `shuffled_per_event`: the
events carried into a stateful pipeline's `transformWithState` per event read
(`contraflow_pipeline_events_total{direction="shuffled"}`; below 1 where partial
aggregation folded events before the shuffle).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

EVENTS = 3_000_000
COUNTRIES = ("DE", "FR", "GB", "PL", "US", "BR", "JP", "IN", "CA", "MX", "ZA")
KINDS = ("click", "view", "purchase", "scroll")
REGIONS = {"DE": "eu", "FR": "eu", "GB": "eu", "PL": "eu", "US": "na", "BR": "sa", "JP": "apac", "IN": "apac"}
SAMPLE_S = 0.25
# Reserved flow args for every flow run (e.g. channel bounds), from `--flow-args=...`; none by default.
FLOW_ARGS = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--flow-args=")), "")
TIMEOUT_S = 1800.0
# `contraflow run` runs this checkout's code (the shared virtualenv's editable install points at
# another one), and its Spark session hands the same package root to the Python workers.
SOURCE_ROOT = Path(__file__).resolve().parent.parent / "src"

SOURCE = """
  define connector input from file
  with codec = "json", preprocessors = ["separate"],
       config = {{"path": "{source}", "mode": "read"}}
  end;
  define connector output from file
  with codec = "json", postprocessors = ["separate"],
       config = {{"path": "{sink}", "mode": "truncate"}}
  end;
  create connector input;
  create connector output;
  connect /connector/input to /pipeline/work;
  connect /pipeline/work to /connector/output;
"""
PASSTHROUGH = """
  define pipeline work
  pipeline
    select event from in into out;
  end;
  create pipeline work;
"""
# w1's region lookup, a script of its own (tests reuse it with other windows).
REGIONS_SCRIPT = """define script regions
script
  let $region = match event.country of
    case "DE" => "eu" case "FR" => "eu" case "GB" => "eu" case "PL" => "eu"
    case "US" => "na"
    case "BR" => "sa"
    case "JP" => "apac" case "IN" => "apac"
    default => "other"
  end;
  event
end;
create script regions;
"""
W1_FILTER = 'select event from in where event.event == "click" or event.value >= 50 into regions;\n'
# The Trickle of w1's pipeline (benchmarks that run it in process compile this).
W1_QUERY = (
    REGIONS_SCRIPT
    + "define window ten_seconds from tumbling\nwith interval = 10000\nscript event.ts end;\n"
    + W1_FILTER
    + 'select {"region": group[0], "count": aggr::stats::count()}\n'
    + "from regions[ten_seconds] group by $region into out;\n"
)
W1 = f"""
  define pipeline work
  pipeline
{textwrap.indent(W1_QUERY, "    ")}  end;
  create pipeline work;
"""


def make_events(path: Path, count: int) -> int:
    """Write `count` JSON lines; returns the mean line length (newline included)."""
    written = 0
    with path.open("wb") as f:
        for start in range(0, count, 100_000):
            lines = [
                orjson.dumps(
                    {
                        "ts": 1_700_000_000_000 + i // 10,
                        "user_id": f"user-{(i * 7919) % 50_000:05d}",
                        "event": KINDS[(i * 31) % 4],
                        "value": (i * 37) % 101,
                        "country": COUNTRIES[(i * 13) % len(COUNTRIES)],
                        "session": f"s-{(i * 104729) % 1_000_003:07d}-{i % 97:02d}",
                        "ua": "Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/139.0",
                    }
                )
                for i in range(start, min(count, start + 100_000))
            ]
            chunk = b"\n".join(lines) + b"\n"
            written += len(chunk)
            f.write(chunk)
    return written // count


def python_loop(path: Path) -> dict[str, Any]:
    """The w1 work as a plain loop on one core: the ceiling for per-event Python."""
    started = time.perf_counter()
    counts: dict[tuple[str, int], int] = {}
    n = 0
    with path.open("rb") as f:
        for line in f:
            n += 1
            event = orjson.loads(line)
            if event["event"] == "click" or event["value"] >= 50:
                key = (REGIONS.get(event["country"], "other"), event["ts"] // 10_000)
                counts[key] = counts.get(key, 0) + 1
    elapsed = time.perf_counter() - started
    return {
        "events_per_s": round(n / elapsed),
        "seconds": round(elapsed, 2),
        "groups": len(counts),
        "kept": sum(counts.values()),
    }


def plain_pyspark(path: Path, work: Path, count: int) -> dict[str, Any]:
    """The w1 work as a plain Structured Streaming query; rate over the batches after the first."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from contraflow.spark import session
    from contraflow.spark.session import driver_java_options

    files = work / "pyspark-in"
    files.mkdir()
    lines = split_lines(path, files, parts=12)
    # Spark's own JIT default (C2): contraflow's C1-only driver would slow this JVM-side query.
    spark = session(
        data_dir=work / "pyspark", **{"spark.driver.extraJavaOptions": driver_java_options(False)}
    )
    schema = StructType(
        [
            StructField("ts", LongType()),
            StructField("user_id", StringType()),
            StructField("event", StringType()),
            StructField("value", LongType()),
            StructField("country", StringType()),
            StructField("session", StringType()),
            StructField("ua", StringType()),
        ]
    )
    region = F.lit("other")
    for country, name in REGIONS.items():
        region = F.when(F.col("country") == country, name).otherwise(region)
    counts = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 2)
        .json(str(files))
        .where((F.col("event") == "click") | (F.col("value") >= 50))
        .withColumn("region", region)
        .withColumn("time", F.timestamp_millis("ts"))
        .withWatermark("time", "0 seconds")
        .groupBy(F.window("time", "10 seconds"), "region")
        .agg(F.count("*").alias("count"))
    )
    started = time.perf_counter()
    query = (
        counts.writeStream.format("noop")
        .outputMode("append")
        .trigger(availableNow=True)
        .option("checkpointLocation", str(work / "pyspark-checkpoint"))
        .start()
    )
    query.awaitTermination()
    wall = time.perf_counter() - started
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    spark.stop()
    steady = batches[1:] or batches
    # Events offered, not `numInputRows`: the JSON scan applies the pushed-down filter, and its
    # rows are only the events that passed it.
    read = files_per_batch(work / "pyspark-checkpoint")
    events = sum(lines[name] for p in steady for name in read[p["batchId"]])
    rows = sum(p["numInputRows"] for p in steady)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
    return {
        "events_per_s": round(events / seconds),
        "rows_after_pushed_filter_per_s": round(rows / seconds),
        "wall_events_per_s": round(count / wall),
        "batches": len(batches),
    }


CHUNK_BYTES = 4 << 20  # what one read task of a flow parses at a time


def line_chunks(path: Path, size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The file in pieces of about `size` bytes, each ending at a line's end."""
    with path.open("rb") as f:
        rest = b""
        while block := f.read(size):
            block = rest + block
            cut = block.rfind(b"\n") + 1
            rest = block[cut:]
            if cut:
                yield block[:cut]
        if rest:
            yield rest


def columnar_polars(path: Path) -> dict[str, Any]:
    """The w1 work in polars, chunk by chunk, partial counts merged at the end (one thread: the
    parent sets POLARS_MAX_THREADS=1 before polars is imported)."""
    import io

    import polars as pl

    region = pl.col("country").replace_strict(REGIONS, default="other", return_dtype=pl.String)
    started = time.perf_counter()
    partials = []
    for chunk in line_chunks(path):
        frame = pl.read_ndjson(io.BytesIO(chunk))
        partials.append(
            frame.filter((pl.col("event") == "click") | (pl.col("value") >= 50))
            .group_by(region.alias("region"), (pl.col("ts") // 10_000).alias("window"))
            .agg(pl.len().alias("count"))
        )
    counts = pl.concat(partials).group_by("region", "window").agg(pl.col("count").sum())
    return _ceiling(path, started, counts.height, int(counts["count"].sum()))


def columnar_arrow(path: Path) -> dict[str, Any]:
    """The w1 work in pyarrow.compute, chunk by chunk, on one thread."""
    import io

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    countries = pa.array(list(REGIONS))
    names = pa.array(list(REGIONS.values()))
    options = pj.ReadOptions(use_threads=False, block_size=CHUNK_BYTES + (1 << 20))
    started = time.perf_counter()
    partials = []
    for chunk in line_chunks(path):
        table = pj.read_json(io.BytesIO(chunk), read_options=options)
        kept = table.filter(pc.or_(pc.equal(table["event"], "click"), pc.greater_equal(table["value"], 50)))
        region = pc.fill_null(pc.take(names, pc.index_in(kept["country"], value_set=countries)), "other")
        keyed = pa.table({"region": region, "window": pc.divide(kept["ts"], 10_000)})
        partials.append(
            keyed.group_by(["region", "window"], use_threads=False).aggregate([([], "count_all")])
        )
    counts = (
        pa.concat_tables(partials)
        .group_by(["region", "window"], use_threads=False)
        .aggregate([("count_all", "sum")])
    )
    return _ceiling(path, started, counts.num_rows, pc.sum(counts["count_all_sum"]).as_py())


def _ceiling(path: Path, started: float, groups: int, kept: int) -> dict[str, Any]:
    elapsed = time.perf_counter() - started
    events = sum(chunk.count(b"\n") for chunk in line_chunks(path))
    return {
        "events_per_s": round(events / elapsed),
        "seconds": round(elapsed, 2),
        "groups": groups,
        "kept": kept,
    }


def columnar_in_child(source: Path) -> dict[str, Any]:
    """w1 in polars and in pyarrow.compute, one thread each, in a child process (the thread
    settings must be in place before either library starts its pools)."""
    env = os.environ | {"POLARS_MAX_THREADS": "1", "OMP_NUM_THREADS": "1"}
    child = subprocess.run(
        [sys.executable, __file__, f"--columnar-child={source}"],
        stdout=subprocess.PIPE,
        check=True,
        timeout=TIMEOUT_S,
        env=env,
    )
    return dict(orjson.loads(child.stdout.splitlines()[-1]))


def split_lines(path: Path, into: Path, parts: int) -> dict[str, int]:
    """Cut the event file into `parts` files on line boundaries (the file source reads files per
    trigger); returns each file's name and line count."""
    data = path.read_bytes()
    step = len(data) // parts
    start = 0
    lines = {}
    for n in range(parts):
        end = len(data) if n == parts - 1 else data.index(b"\n", start + step) + 1
        name = f"part-{n:03d}.json"
        (into / name).write_bytes(data[start:end])
        lines[name] = data.count(b"\n", start, end)
        start = end
    return lines


def files_per_batch(checkpoint: Path) -> dict[int, list[str]]:
    """The file names each micro-batch of a file-source query read, from the source's metadata
    log (`sources/0/N`: a version line, then one JSON entry per file)."""
    read: dict[int, list[str]] = {}
    for entry in (checkpoint / "sources" / "0").iterdir():
        if entry.name.isdigit():
            files = [json.loads(line) for line in entry.read_text().splitlines()[1:] if line.strip()]
            read[int(entry.name)] = [Path(f["path"]).name for f in files]
    return read


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_tree(root: int) -> list[int]:
    """`root` and every descendant, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def process_kind(pid: int, root: int) -> str:
    if pid == root:
        return "runtime"
    with contextlib.suppress(OSError):
        cmd = (Path("/proc") / str(pid) / "cmdline").read_bytes()
        if b"java" in cmd.split(b"\0", 1)[0]:
            return "jvm"
        if b"spu" in cmd:
            return "spu"
        return "python_workers"
    return "other"


def cpu_by_kind(root: int) -> dict[str, float]:
    """CPU seconds so far of every process in the tree, summed by kind."""
    tick = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    for pid in process_tree(root):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
            seconds = (int(fields[11]) + int(fields[12])) / tick
            kind = process_kind(pid, root)
            totals[kind] = totals.get(kind, 0.0) + seconds
    return totals


METRIC = re.compile(r"^(\w+)\{([^}]*)\} ([0-9.e+-]+)$")


def read_metrics(api: str) -> list[tuple[str, dict[str, str], float]]:
    text = httpx.get(f"http://{api}/metrics", timeout=5).text
    found = []
    for line in text.splitlines():
        match = METRIC.match(line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
            found.append((match.group(1), labels, float(match.group(3))))
    return found


def progress_counter(name: str, metrics: list[tuple[str, dict[str, str], float]]) -> float:
    """passthrough: events the sink delivered; w1: events the pipeline read."""
    if name == "passthrough":
        return sum(
            v
            for m, labels, v in metrics
            if m == "contraflow_connector_events_total"
            and labels.get("connector") == "output"
            and labels.get("port") == "in"
        )
    return sum(
        v
        for m, labels, v in metrics
        if m == "contraflow_pipeline_events_total" and labels.get("direction") == "in"
    )


def stage_seconds(metrics: list[tuple[str, dict[str, str], float]]) -> dict[str, float]:
    """Wall seconds so far per stage: the runtime's own stages and Spark's micro-batches."""
    stages = {
        labels["stage"]: v
        for m, labels, v in metrics
        if m == "contraflow_stage_seconds_total" and "stage" in labels
    }
    for m, labels, v in metrics:
        if m == "contraflow_pipeline_batch_phase_seconds_total" and "phase" in labels:
            key = f"spark_{labels['phase']}"
            stages[key] = stages.get(key, 0.0) + v
    stages["spark_micro_batches"] = sum(
        v for m, _, v in metrics if m == "contraflow_pipeline_batch_duration_seconds_sum"
    )
    stages["spark_batch_count"] = sum(
        v for m, _, v in metrics if m == "contraflow_pipeline_batch_duration_seconds_count"
    )
    stages["shuffled_events"] = sum(
        v
        for m, labels, v in metrics
        if m == "contraflow_pipeline_events_total" and labels.get("direction") == "shuffled"
    )
    return stages


def run_flow(
    name: str, body: str, source: Path, work: Path, count: int, spu_mode: str | None = None
) -> dict[str, Any]:
    """Run one flow with `contraflow run` and measure its steady state between count/3 and count events."""
    flow_dir = work / f"{name}-{spu_mode or 'default'}"
    flow_dir.mkdir()
    sink = flow_dir / "out.jsonl"
    troy = flow_dir / "flow.troy"
    args = f"args\n  {FLOW_ARGS}\n" if FLOW_ARGS else ""
    troy.write_text(
        f"define flow {name}\n{args}flow\n{body}{SOURCE.format(source=source, sink=sink)}end;\ndeploy flow {name};\n"
    )
    api = f"127.0.0.1:{free_port()}"
    log = (flow_dir / "run.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "contraflow",
            "run",
            str(troy),
            "--data-dir",
            str(flow_dir / "data"),
            "--api",
            api,
            "--no-status",
            "--spu-port",
            "0",
            *(["--embedded-spu", spu_mode] if spu_mode else []),  # else the runtime's default
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=os.environ
        | {"PYTHONPATH": os.pathsep.join(filter(None, [str(SOURCE_ROOT), os.environ.get("PYTHONPATH")]))},
    )
    low, high = count // 3, count
    # Each mark: when the counter first reached it, the counter's value then (it moves in micro-batch
    # steps, so past the threshold), CPU by process kind and the stage counters.
    marks: dict[str, tuple[float, float, dict[str, float], dict[str, float]]] = {}
    started = time.perf_counter()
    try:
        samples: list[tuple[float, float]] = []
        while "high" not in marks:
            if process.poll() is not None:
                tail = Path(log.name).read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{name}: contraflow run exited with {process.returncode}:\n{tail}")
            if time.perf_counter() - started > TIMEOUT_S:
                raise RuntimeError(f"{name}: no steady state within {TIMEOUT_S} s")
            time.sleep(SAMPLE_S)
            with contextlib.suppress(httpx.HTTPError):
                metrics = read_metrics(api)
                now = time.perf_counter()
                done = progress_counter(name, metrics)
                samples.append((now, done))
                for mark, threshold in (("low", low), ("high", high)):
                    if mark not in marks and done >= threshold:
                        marks[mark] = (now, done, cpu_by_kind(process.pid), stage_seconds(metrics))
        first_output = next((t for t, d in samples if d > 0), started) - started
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have exited on its own
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        log.close()
    (t0, done0, cpu0, stages0), (t1, done1, cpu1, stages1) = marks["low"], marks["high"]
    # The events counted between the marks, not `high - low`: with a few large micro-batches the
    # counter overshoots each threshold by up to a batch (shuffled_per_event read 0.22 for 0.39).
    events = done1 - done0
    if events <= 0:
        raise RuntimeError(f"{name}: one micro-batch took the counter past both marks; run more events")
    seconds = t1 - t0
    cpu = {k: round((cpu1.get(k, 0) - cpu0.get(k, 0)) / events * 1e6, 2) for k in sorted(cpu1)}
    batches = stages1.pop("spark_batch_count", 0) - stages0.pop("spark_batch_count", 0)
    shuffled = stages1.pop("shuffled_events", 0) - stages0.pop("shuffled_events", 0)
    stages = {k: round((stages1.get(k, 0) - stages0.get(k, 0)) / events * 1e6, 2) for k in sorted(stages1)}
    return {
        "events_per_s": round(events / seconds),
        "steady_state_events": events,
        "seconds_to_first_progress": round(first_output, 1),
        "cpu_us_per_event": cpu | {"total": round(sum(cpu.values()), 2)},
        "stage_wall_us_per_event": stages,
        "spark_micro_batches": round(batches),
        "events_per_micro_batch": round(events / batches) if batches else None,
        # Events carried into the stateful stage per event read (partial aggregation folds the rest).
        "shuffled_per_event": round(shuffled / events, 3),
    }


def compare_spu_modes(source: Path, work: Path, count: int) -> dict[str, Any]:
    """passthrough with the embedded SPU as a thread of the runtime and as a child process, side by side."""
    runs = {
        mode: run_flow("passthrough", PASSTHROUGH, source, work, count, mode)
        for mode in ("thread", "process")
    }
    return {
        mode: {"events_per_s": r["events_per_s"], "cpu_us_per_event": r["cpu_us_per_event"]}
        for mode, r in runs.items()
    } | {"process_vs_thread": round(runs["process"]["events_per_s"] / runs["thread"]["events_per_s"], 3)}


def plain_pyspark_in_child(source: Path, work: Path, count: int) -> dict[str, Any]:
    """`plain_pyspark` in a child process: a stopped session's JVM lives on until its Python
    exits, and the flows measured next should not share the box with it."""
    child = subprocess.run(
        [sys.executable, __file__, f"--pyspark-child={source},{work},{count}"],
        stdout=subprocess.PIPE,
        check=True,
        timeout=TIMEOUT_S,
    )
    return dict(orjson.loads(child.stdout.splitlines()[-1]))


def main() -> None:
    columnar = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--columnar-child=")), "")
    if columnar:
        print(
            json.dumps({"polars": columnar_polars(Path(columnar)), "pyarrow": columnar_arrow(Path(columnar))})
        )
        return
    child = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--pyspark-child=")), "")
    if child:
        source, work, events = child.split(",")
        with contextlib.redirect_stdout(sys.stderr):
            rates = plain_pyspark(Path(source), Path(work), int(events))
        print(json.dumps(rates))
        return
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    only = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")), "")
    count = int(args[0]) if args else EVENTS
    wanted = set(only.split(",")) if only else {"python", "pyspark", "columnar", "passthrough", "w1"}
    work = Path(tempfile.mkdtemp(prefix="bench-hot-path-"))
    try:
        source = work / "events.jsonl"
        result: dict[str, Any] = {"events": count, "event_bytes": make_events(source, count)}
        if "python" in wanted:
            result["python"] = python_loop(source)
        if "pyspark" in wanted:
            result["pyspark"] = plain_pyspark_in_child(source, work, count)
        if "columnar" in wanted:
            result["columnar"] = columnar_in_child(source)
        for name, body in (("passthrough", PASSTHROUGH), ("w1", W1)):
            if name in wanted:
                result[name] = run_flow(name, body, source, work, count)
                for base in ("python", "pyspark"):
                    if base in result:
                        rate = result[name]["events_per_s"] / result[base]["events_per_s"]
                        result[name][f"ratio_vs_{base}"] = round(rate, 4)
                for engine, ceiling in result.get("columnar", {}).items():
                    rate = result[name]["events_per_s"] / ceiling["events_per_s"]
                    result[name][f"ratio_vs_columnar_{engine}"] = round(rate, 4)
        if "spu" in wanted:
            result["embedded_spu"] = compare_spu_modes(source, work, count)
        result["load_average"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
