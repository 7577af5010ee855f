"""Keeping a process's terminal for its own messages while Spark and its JVM write elsewhere.

Spark's JVM, its Python workers and several libraries print banners and
warnings straight to file descriptors 1 and 2, which children inherit.
`quiet_process_output` points both at a log file for as long as it is
active and hands back handles on the original stdout and stderr, so the
command's own output (and a person's terminal) stays clean.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def quiet_process_output(log_path: Path) -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """Send fds 1 and 2 (and so every child process's output) to `log_path`.

    Yields writable handles on the original stdout and stderr; they are
    restored on exit.
    """
    saved = [os.dup(1), os.dup(2)]
    with open(log_path, "ab") as log:
        for fd in (1, 2):
            os.dup2(log.fileno(), fd)
        out, err = os.fdopen(os.dup(saved[0]), "wb"), os.fdopen(os.dup(saved[1]), "wb")
        try:
            yield out, err
        finally:
            out.flush()
            err.flush()
            out.close()
            err.close()
            for fd, original in zip((1, 2), saved, strict=True):
                os.dup2(original, fd)
                os.close(original)


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """SIGTERM ends the block as `SystemExit(143)` in the main thread, so `with` blocks and
    `finally` clauses run (temporary directories go, Spark stops) instead of the process
    vanishing with its files left behind. Only the first one does: a second SIGTERM must not
    cut that cleanup short. The previous handler comes back afterwards."""

    def terminate(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def ticking(stream: IO[bytes], label: str, interval_s: float = 1.0) -> Iterator[Callable[[], None]]:
    """`label ... N s` on `stream`, redrawn in place every second while the block runs and erased
    after it, so a person knows a slow start is under way. Nothing when `stream` is not a terminal
    (a pipe or file gets the command's output only). Yields a function that erases it early
    (before the block's first output line)."""
    if not stream.isatty():
        yield lambda: None
        return
    done = threading.Event()
    lock = threading.Lock()
    begun = time.monotonic()

    def draw() -> None:
        while not done.wait(interval_s):
            with lock:
                if not done.is_set():
                    stream.write(f"\r{label} ... {time.monotonic() - begun:.0f} s".encode())
                    stream.flush()

    def erase() -> None:
        with lock:
            if done.is_set():
                return
            done.set()
            stream.write(b"\r\x1b[K")  # back to the line's start, and clear it
            stream.flush()

    drawer = threading.Thread(target=draw, name="ticking", daemon=True)
    drawer.start()
    try:
        yield erase
    finally:
        erase()
        drawer.join()
