"""The progress line of slow commands: ticking in place on a terminal, nothing in a pipe or file."""

from __future__ import annotations

import contextlib
import os
import pty
import time
from pathlib import Path

from contraflow.process_output import ticking


def test_a_terminal_sees_the_seconds_tick_and_the_line_erased() -> None:
    leader, follower = pty.openpty()
    shown = b""
    try:
        with os.fdopen(follower, "wb") as terminal:
            with ticking(terminal, "starting Spark", interval_s=0.2):
                deadline = time.monotonic() + 30
                while shown.count(b"\rstarting Spark ... ") < 3 and time.monotonic() < deadline:
                    shown += os.read(leader, 4096)
            shown += os.read(leader, 4096)
    finally:
        os.close(leader)
    assert shown.startswith(b"\rstarting Spark ... 0 s")
    assert shown.count(b"\rstarting Spark ... ") >= 3
    assert shown.endswith(b"\r\x1b[K")


def test_a_file_gets_nothing(tmp_path: Path) -> None:
    with (tmp_path / "out").open("wb") as output, ticking(output, "starting Spark", interval_s=0.05):
        time.sleep(0.2)
    assert (tmp_path / "out").read_bytes() == b""


def test_erasing_early_stops_the_ticks_before_the_block_ends() -> None:
    leader, follower = pty.openpty()
    shown = b""
    try:
        with os.fdopen(follower, "wb") as terminal:
            with ticking(terminal, "running", interval_s=0.05) as erase:
                deadline = time.monotonic() + 30
                while b"\rrunning ... " not in shown and time.monotonic() < deadline:
                    shown += os.read(leader, 4096)
                erase()
                erased_at = len(shown)
                time.sleep(0.3)  # six intervals: any tick would show now
            os.set_blocking(leader, False)
            with contextlib.suppress(BlockingIOError):
                shown += os.read(leader, 4096)
    finally:
        os.close(leader)
    after = shown[erased_at:]
    assert after.count(b"\r\x1b[K") <= 1 and b"running ... " not in after
