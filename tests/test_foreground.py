"""Under make, Ctrl-C reaches the command alone, so `make` reports the command's own exit status
(a real make, a real pseudo-terminal, a real SIGINT from the terminal's Ctrl-C)."""

from __future__ import annotations

import os
import pty
import select
import sys
import time
from pathlib import Path

from tests.cli_process import SRC

CHILD = """
import signal, sys, time
from contraflow.foreground import own_foreground_group

stopped = []
signal.signal(signal.SIGINT, lambda *_: stopped.append(1))
with own_foreground_group() as moved:
    print("ready moved=%s" % moved, flush=True)
    while not stopped:
        time.sleep(0.05)
    print("draining", flush=True)
    time.sleep(0.5)  # like the runtime draining its flows after Ctrl-C
print("clean exit", flush=True)
"""


def read_until(fd: int, text: bytes, timeout_s: float = 30.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout_s
    # poll, not select: late in the suite the pty's descriptor can be above select's 1024 limit.
    watch = select.poll()
    watch.register(fd, select.POLLIN)
    while text not in seen and time.monotonic() < deadline:
        if watch.poll(200):
            try:
                seen += os.read(fd, 4096)
            except OSError:  # the terminal closed
                break
    return seen


def test_ctrl_c_under_make_ends_with_the_commands_status(tmp_path: Path) -> None:
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "Makefile").write_text(f"run:\n\t{sys.executable} child.py\n")
    pid, terminal = pty.fork()
    if pid == 0:  # the child: a session whose controlling terminal is the pty, like a login shell's
        os.chdir(tmp_path)
        os.environ["PYTHONPATH"] = SRC
        os.execvp("make", ["make", "--no-print-directory", "run"])
    try:
        output = read_until(terminal, b"ready")
        assert b"ready moved=True" in output, output
        os.write(terminal, b"\x03")  # Ctrl-C, as typed
        output += read_until(terminal, b"clean exit")
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(terminal)
    assert b"draining" in output and b"clean exit" in output, output
    assert os.waitstatus_to_exitcode(status) == 0, output
