"""A stateful pipeline whose Spark (driver, JVM and Python workers) is SIGKILLed inside a micro-batch,
then restarted from the same checkpoint, counts every input exactly once and continues its counts.

The query first runs in a child process with its own local Spark; the restart
runs in the test's Spark session (another runtime picking the checkpoint up),
which also spares a second Spark start on this small box.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contraflow.spu.api import read_topic
from contraflow.spu.client import SpuClient
from tests.cli_process import child_env
from tests.pipeline.spark.harness import read_values
from tests.pipeline.spark.pipeline_worker import PYTHON_MODULES, start_query

WORKER = Path(__file__).with_name("pipeline_worker.py")
STARTUP_S = 180  # a fresh local Spark on the shared 2-core box


def start_worker(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """The worker in its own session (process group), so a kill takes its JVM and Python workers too."""
    env = child_env(tests=True)
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, str(WORKER), *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def batches(checkpoint: Path, kind: str) -> set[int]:
    """Batch ids with an entry in the checkpoint's `offsets` (planned) or `commits` (done) log."""
    directory = checkpoint / kind
    if not directory.is_dir():
        return set()
    return {int(name) for name in os.listdir(directory) if name.isdigit()}


def in_flight(checkpoint: Path) -> set[int]:
    """Micro-batches planned (offsets logged) but not committed."""
    return batches(checkpoint, "offsets") - batches(checkpoint, "commits")


def wait_until(condition: Callable[[], object], what: str, timeout_s: float, poll_s: float = 0.01) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s}s")
        time.sleep(poll_s)


def test_sigkill_inside_a_micro_batch_then_restart_counts_every_event_once(
    spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counters (the script's, the python::map's) and the python::batch's running total carry
    on from their state."""
    monkeypatch.setenv("CONTRAFLOW_PATH", str(PYTHON_MODULES))  # for the worker and the restart
    source, sink = "crash.counter.in", "crash.counter.out"
    spu.create_topic(source)
    spu.create_topic(sink)
    checkpoint = tmp_path / "checkpoint"
    feed = [{"i": i} for i in range(45)]

    def produce(start: int, end: int) -> None:
        spu.produce(source, 0, [f'{{"i": {i}}}'.encode() for i in range(start, end)])

    produce(0, 15)
    first = start_worker([spu_addr, source, sink, str(checkpoint), str(tmp_path / "spark")], tmp_path / "log")
    try:
        wait_until(lambda: len(read_values(spu, sink)) == 15, "the first 15 counts", STARTUP_S, 0.2)
        wait_until(lambda: batches(checkpoint, "offsets") == batches(checkpoint, "commits"), "a commit", 30)
        produce(15, 30)
        # Kill as soon as Spark has planned the next batch (its offsets are logged) but not committed it.
        wait_until(lambda: in_flight(checkpoint), "a new micro-batch", 60)
        kill_group(first)
    finally:
        kill_group(first)
    assert in_flight(checkpoint), "the kill came after the batch committed: nothing was interrupted"
    produce(30, 45)  # arrives while Spark is down

    restarted = start_query(spark, spu_addr, source, sink, str(checkpoint))
    try:
        restarted.processAllAvailable()
        assert restarted.exception() is None
    finally:
        restarted.stop()

    out = read_values(spu, sink)
    assert [v["count"] for v in out] == list(range(1, 46))  # the counter state survived the crash
    assert [v["py_count"] for v in out] == list(range(1, 46))  # and so did the Python operators'
    assert [v["total"] for v in out] == [k * (k + 1) // 2 for k in range(1, 46)]
    assert [v["event"] for v in out] == feed  # every input once, in order


def test_sigkill_inside_a_routed_micro_batch_then_restart_writes_every_event_once(
    spark: Any, spu: SpuClient, spu_addr: str, tmp_path: Path
) -> None:
    """The same for a routing-only pipeline, whose batches cross Spark as envelopes: the
    interrupted batch is replayed as the same SPU transaction, a no-op if its commit got through."""
    source, sink = "crash.route.in", "crash.route.out"
    spu.create_topic(source)
    spu.create_topic(sink)
    checkpoint = tmp_path / "checkpoint"
    fed: list[bytes] = []

    def produce(count: int, per_batch: int) -> None:
        for _ in range(0, count, per_batch):
            values = [b'{"i":%d}' % (len(fed) + i) for i in range(per_batch)]
            spu.produce(source, 0, values)
            fed.extend(values)

    produce(15, 5)
    args = [spu_addr, source, sink, str(checkpoint), str(tmp_path / "spark"), "route"]
    first = start_worker(args, tmp_path / "log")
    try:
        wait_until(lambda: len(read_topic(spu, sink)) == 15, "the first 15 events", STARTUP_S, 0.2)
        wait_until(lambda: batches(checkpoint, "offsets") == batches(checkpoint, "commits"), "a commit", 30)
        produce(60_000, 5_000)  # big enough a batch to be caught in flight
        wait_until(lambda: in_flight(checkpoint), "a new micro-batch", 60)
        kill_group(first)
    finally:
        kill_group(first)
    assert in_flight(checkpoint), "the kill came after the batch committed: nothing was interrupted"
    produce(100, 10)  # arrives while Spark is down

    restarted = start_query(spark, spu_addr, source, sink, str(checkpoint), "route")
    try:
        restarted.processAllAvailable()
        assert restarted.exception() is None
    finally:
        restarted.stop()
    assert [r.value for r in read_topic(spu, sink)] == fed  # every input once, in order
