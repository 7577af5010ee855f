"""Soak: a flow on an SPU cluster under steady load for a long time, watched for growth (issue 32).

A controller and three SPUs (`LocalCluster`) and `contraflow run` of a flow
`log` topic `in` -> a pipeline that rebuilds each record (so it runs as a Spark
query: a routing-only one would run none) -> `log` topic `out`, each
its own process (the runtime with its Spark JVM and Python workers in its
session). A feeder writes `--rate` events/s into `in` (acks=all, batches of
10, each event stamped with its send time); a reader tails `out` (committed)
and takes each event's end-to-end latency. Every `--sample` seconds one
sample: per process its RSS and PSS (MiB) and open file descriptors (the
runtime's session: its own Python, the JVM, the Python workers summed; forked
workers share pages, so their summed RSS counts those pages once per worker
and only their summed PSS is what they take), each data
directory's disk use (MiB), and the latency p50/p99 (ms) of the events read
in the interval. Target: RSS and fds flat after warm-up, latency without
drift; disk grows with the data (no retention on the topics here), not with
the replicated tables (they compact themselves: docs/spu-cluster.md).

Prints each sample as a JSON line on stderr while it runs and one JSON object
at the end: the samples, and per figure its value at the warm-up mark (a sixth
of the run, at most 5 minutes: the baseline, same run), at the end, and their
ratio; plus how many events came out (within a 2-minute drain) and how many twice.
Pick a rate the flow sustains on the machine: past it the latency grows with the
backlog, which is not the drift this is after.

Run: PYTHONPATH=src python benchmarks/soak.py [--minutes 30] [--rate 100] [--sample 60]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from contraflow.spu.cli.local_cluster import LocalCluster
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import Acks
from contraflow.spu.protocol.topics import TopicConfig
from density import pss_bytes  # noqa: E402

FLOW = """
define flow soak
flow
  define connector input from log with codec = "json", config = {"topic": "in"} end;
  define connector output from log with codec = "json", config = {"topic": "out"} end;
  define pipeline pass
  pipeline
    select {"n": event.n, "t": event.t, "hop": 1} from in into out;
  end;
  create connector input;
  create connector output;
  create pipeline pass;
  connect /connector/input to /pipeline/pass;
  connect /pipeline/pass to /connector/output;
end;
deploy flow soak;
"""
CHUNK = 10
READY_LINE = "Ctrl-C drains and stops"
MIB = 1 << 20


class Feeder(threading.Thread):
    """`rate` events/s into `in`, numbered from 0, each stamped with its send time (ns)."""

    def __init__(self, bootstrap: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.rate = bootstrap, rate
        self.sent = 0
        self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with SpuClient(self.bootstrap) as client:
            began = time.monotonic()
            while not self.stop.is_set():
                values = [
                    orjson.dumps({"n": n, "t": time.time_ns()}) for n in range(self.sent, self.sent + CHUNK)
                ]
                try:
                    client.produce("in", 0, values, acks=Acks.COMMITTED)
                    self.sent += CHUNK
                except Exception:  # noqa: BLE001 - counted; the soak goes on
                    self.failed += 1
                time.sleep(max(0.0, began + self.sent / self.rate - time.monotonic()))


class Reader(threading.Thread):
    """Tails `out` (committed): every event's latency, and which numbers came out how often."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.latencies_ms: list[float] = []  # since the last sample
        self.seen: dict[int, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def run(self) -> None:
        with SpuClient(self.bootstrap) as client:
            offset = 0
            while not self.stop.is_set():
                result = client.fetch("out", 0, offset, 1 << 20, isolation="committed")
                now = time.time_ns()
                with self.lock:
                    for batch in result.batches:
                        for value in batch.values():
                            event = orjson.loads(bytes(value))
                            self.seen[event["n"]] = self.seen.get(event["n"], 0) + 1
                            self.latencies_ms.append((now - event["t"]) / 1e6)
                offset = max(offset, result.next_offset)
                if not result.batches:
                    time.sleep(0.05)

    def take(self) -> list[float]:
        with self.lock:
            taken, self.latencies_ms = self.latencies_ms, []
        return taken


# -- what the processes use ----------------------------------------------------------------------


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def usage(pid: int) -> tuple[float, float, int]:
    """(RSS MiB, PSS MiB, open fds) of one process; zeros once it is gone."""
    try:
        rss_kb = int(_status(pid).get("VmRSS", "0 kB").split()[0])
        return rss_kb / 1024, pss_bytes(pid) / MIB, len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return 0.0, 0.0, 0


def session_members(sid: int) -> dict[str, list[int]]:
    """The processes of session `sid` by role: the runtime itself, Spark's JVM, Python workers."""
    roles: dict[str, list[int]] = {"runtime": [], "spark-jvm": [], "python-workers": []}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            exe = os.path.basename(os.readlink(f"/proc/{entry}/exe"))
        except OSError:
            continue
        if int(fields[3]) != sid:
            continue
        pid = int(entry)
        role = "runtime" if pid == sid else "spark-jvm" if exe == "java" else "python-workers"
        roles[role].append(pid)
    return roles


def disk_mib(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                continue
    return total / MIB


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def sample(
    elapsed_s: float, cluster: LocalCluster, runtime_sid: int, dirs: dict[str, Path], reader: Reader
) -> dict[str, Any]:
    procs: dict[str, dict[str, float]] = {}
    for member in cluster.members.values():
        rss, pss, fds = usage(member.pid)
        procs[member.name] = {"rss_mib": round(rss, 1), "pss_mib": round(pss, 1), "fds": fds}
    for role, pids in session_members(runtime_sid).items():
        used = [usage(p) for p in pids]
        procs[role] = {
            "rss_mib": round(sum(u[0] for u in used), 1),
            "pss_mib": round(sum(u[1] for u in used), 1),
            "fds": sum(u[2] for u in used),
            "count": len(pids),
        }
    latencies = reader.take()
    return {
        "minute": round(elapsed_s / 60, 2),
        "processes": procs,
        "disk_mib": {name: round(disk_mib(path), 1) for name, path in dirs.items()},
        "latency_ms": {
            "p50": percentile(latencies, 0.5),
            "p99": percentile(latencies, 0.99),
            "events": len(latencies),
        },
    }


def drift(samples: list[dict[str, Any]], warm_minute: float) -> dict[str, Any]:
    """Each figure at the warm-up mark (baseline) and at the end, and end / baseline."""
    base = next((s for s in samples if s["minute"] >= warm_minute), samples[0])
    end = samples[-1]

    def compare(a: float | None, b: float | None) -> dict[str, Any]:
        ratio = round(b / a, 3) if a and b is not None else None
        return {"baseline": a, "end": b, "ratio": ratio}

    out: dict[str, Any] = {"baseline_minute": base["minute"], "end_minute": end["minute"]}
    for name in end["processes"]:
        for figure in ("rss_mib", "pss_mib", "fds"):
            out[f"{name}.{figure}"] = compare(base["processes"][name][figure], end["processes"][name][figure])
    for name in end["disk_mib"]:
        out[f"disk.{name}"] = compare(base["disk_mib"][name], end["disk_mib"][name])
    p99s = [
        s["latency_ms"]["p99"] for s in samples if s["minute"] >= base["minute"] and s["latency_ms"]["p99"]
    ]
    out["latency_p99_ms"] = compare(p99s[0] if p99s else None, p99s[-1] if p99s else None)
    if len(p99s) > 2:
        out["latency_p99_ms"]["median_after_warmup"] = statistics.median(p99s)
    return out


# -- the run -------------------------------------------------------------------------------------


def start_runtime(work: Path, bootstrap: str) -> subprocess.Popen[bytes]:
    flow = work / "soak.troy"
    flow.write_text(FLOW)
    log = (work / "runtime.log").open("ab")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    args = [
        "run",
        str(flow),
        "--spu",
        bootstrap,
        "--data-dir",
        str(work / "runtime"),
        "--no-api",
        "--no-status",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "contraflow", *args],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=work,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    while READY_LINE not in (work / "runtime.log").read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"contraflow run did not start; see {work / 'runtime.log'}")
        time.sleep(0.5)
    return process


def stop_runtime(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)


def soak(work: Path, minutes: float, rate: int, sample_s: float) -> dict[str, Any]:
    cluster = LocalCluster(work / "cluster")
    cluster.start(3)
    try:
        with SpuClient(cluster.bootstrap) as admin:
            config = admin.replicated_config(TopicConfig(partitions=1))
            for topic in ("in", "out"):
                admin.create_topic(topic, config)
        runtime = start_runtime(work, cluster.bootstrap)
        feeder, reader = Feeder(cluster.bootstrap, rate), Reader(cluster.bootstrap)
        try:
            feeder.start()
            reader.start()
            dirs = {m.name: work / "cluster" / m.name for m in cluster.members.values()}
            dirs["runtime"] = work / "runtime"
            samples: list[dict[str, Any]] = []
            began = time.monotonic()
            while (elapsed := time.monotonic() - began) < minutes * 60:
                time.sleep(min(sample_s, max(0.0, minutes * 60 - elapsed)))
                samples.append(sample(time.monotonic() - began, cluster, runtime.pid, dirs, reader))
                print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
            feeder.stop.set()
            feeder.join()
            deadline = time.monotonic() + 120
            while len(reader.seen) < feeder.sent and time.monotonic() < deadline:
                time.sleep(0.5)
            reader.stop.set()
            reader.join()
        finally:
            stop_runtime(runtime)
        return {
            "minutes": minutes,
            "rate_per_s": rate,
            "sent": feeder.sent,
            "failed_produces": feeder.failed,
            # every event sent came out within the drain (else the flow fell behind the rate)
            "caught_up": len(reader.seen) >= feeder.sent,
            "delivered": len(reader.seen),
            "duplicated": sum(1 for count in reader.seen.values() if count > 1),
            "load_average": os.getloadavg(),
            "drift": drift(samples, min(5.0, minutes / 6)),
            "samples": samples,
        }
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to run (default 30)")
    parser.add_argument("--rate", type=int, default=100, help="events per second fed (default 100)")
    parser.add_argument("--sample", type=float, default=60.0, help="seconds between samples (default 60)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="soak-") as work:
        print(json.dumps(soak(Path(work), options.minutes, options.rate, options.sample), indent=1))


if __name__ == "__main__":
    main()
