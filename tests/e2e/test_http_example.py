"""examples/http as the README tells it: the receiver stops, the breaker opens and the source
stops; the receiver comes back and everything pending arrives; the channel log holds each event
once. A real receiver process, a real `contraflow run`, real sockets."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from contraflow.spu.api import LocalLog, read_topic
from tests.cli_process import ROOT
from tests.e2e.run_process import RunProcess

EXAMPLE = Path(ROOT) / "examples" / "http"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_receiver(port: int, out: Path) -> subprocess.Popen[bytes]:
    receiver = subprocess.Popen(
        [sys.executable, str(EXAMPLE / "receiver.py"), "--port", str(port), "--out", str(out)],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return receiver
        time.sleep(0.1)
    receiver.kill()
    raise AssertionError("the receiver did not start")


def channel_events(data_dir: Path, topic: str) -> list[dict[str, int]]:
    with LocalLog(data_dir / "spu", read_only=True) as log:
        return [orjson.loads(r.value) for r in read_topic(log, topic)]


def channel_seqs(data_dir: Path, topic: str) -> list[int]:
    return [event["seq"] for event in channel_events(data_dir, topic)]


def received(out: Path) -> list[int]:
    return [orjson.loads(line)["seq"] for line in out.read_bytes().splitlines()] if out.exists() else []


def breaker_states(log_file: Path) -> list[str]:
    """The receiver's breaker transitions, in order, from the runtime's log file."""
    lines = log_file.read_text().splitlines() if log_file.exists() else []
    return [
        "open" if "state=open" in line else "closed"
        for line in lines
        if "event=breaker" in line and "receiver" in line
    ]


@pytest.mark.timeout(900)  # a Spark start, an outage and a recovery: minutes on a loaded 2-core box
def test_receiver_down_opens_the_breaker_and_nothing_is_lost(tmp_path: Path) -> None:
    port = free_port()
    flow = tmp_path / "flow.troy"
    flow.write_text((EXAMPLE / "flow.troy").read_text().replace("127.0.0.1:8139", f"127.0.0.1:{port}"))
    out, data = tmp_path / "received.jsonl", tmp_path / "data"
    receiver = start_receiver(port, out)
    runtime = RunProcess(flow, data, tmp_path, tmp_path / "run.log")
    try:
        runtime.wait_until(lambda: len(received(out)) >= 10, 240, "the first deliveries")
        receiver.terminate()
        receiver.wait(10)
        log_file = data / "logs" / "run.log"
        runtime.wait_until(lambda: breaker_states(log_file)[-1:] == ["open"], 60, "the breaker to open")
        time.sleep(1.0)  # what was on its way when the breaker opened
        held_at = len(channel_events(data, "http.ticks.out"))
        time.sleep(3.0)  # 15 ticks at 5 a second, were the source not stopped
        assert len(channel_events(data, "http.ticks.out")) - held_at <= 2
        receiver = start_receiver(port, out)
        runtime.wait_until(lambda: breaker_states(log_file)[-1:] == ["closed"], 60, "the breaker to close")
        sent_before_stop = channel_seqs(data, "http.stamp.out")
        runtime.wait_until(lambda: set(sent_before_stop) <= set(received(out)), 60, "the pending events")
        assert runtime.terminate() == 0
    finally:
        runtime.kill()
        receiver.kill()
    sent = channel_seqs(data, "http.stamp.out")
    assert sent == list(range(len(sent)))  # the log: each event once, in order
    assert set(received(out)) == set(sent)  # everything reached the receiver (HTTP may repeat one)
