"""A streaming query killed with SIGKILL mid-stream and restarted from its checkpoint
leaves every input record in the output topic exactly once.

The restarted query replays the batch the kill interrupted as its offset log planned it (150
records), then reads the rest in one batch: what was interrupted comes back as it was, what
follows needs no ten more micro-batches."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from tests.cli_process import child_env
from tests.spark.test_bridge import read_all

WORKER = Path(__file__).with_name("passthrough_worker.py")
RECORDS = 1500  # the kill comes after 300 of them, with at least eight more batches of 150 to go


def start_worker(
    spu_addr: str, src: str, dst: str, checkpoint: str, data_dir: Path, drain: bool
) -> subprocess.Popen:
    # drained: everything left in one batch after the replayed one
    env = child_env({"DRAIN": "1" if drain else "0", "MAX_OFFSETS": str(RECORDS) if drain else "150"})
    return subprocess.Popen(
        [sys.executable, str(WORKER), spu_addr, src, dst, checkpoint, str(data_dir)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def wait_for_output(spu, dst: str, at_least: int, timeout_s: float = 120) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        count = spu.describe_topic(dst).partitions[0].high_watermark
        if count >= at_least:
            return count
        time.sleep(0.05)
    raise AssertionError(f"fewer than {at_least} records reached {dst} in {timeout_s}s")


def test_sigkill_mid_stream_then_restart_is_exactly_once(spu, spu_addr, topic_name, tmp_path: Path) -> None:
    src, dst = topic_name + "-in", topic_name + "-out"
    spu.create_topic(src)
    spu.create_topic(dst)
    sent = [b"r%05d" % i for i in range(RECORDS)]
    for start in range(0, RECORDS, 500):
        spu.produce(src, 0, sent[start : start + 500])
    checkpoint = str(tmp_path / "checkpoint")

    first = start_worker(spu_addr, src, dst, checkpoint, tmp_path / "run1", drain=False)
    try:
        written_before_kill = wait_for_output(spu, dst, 300)
        first.kill()  # SIGKILL: no chance to finish the batch in flight
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
    assert written_before_kill < RECORDS, "the query finished before it could be killed mid-stream"

    second = start_worker(spu_addr, src, dst, checkpoint, tmp_path / "run2", drain=True)
    out, _ = second.communicate(timeout=240)
    assert second.returncode == 0 and "drained" in out

    received = read_all(spu, dst)
    duplicates = [v for v, n in Counter(received).items() if n > 1]
    assert duplicates == []
    assert sorted(received) == sent
