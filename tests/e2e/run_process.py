"""`contraflow run` as a real child process (its own process group, so SIGKILL takes Spark's JVM too).

Each run started is remembered until `kill_leftovers` (called after every test by
tests/conftest.py): a test that fails or times out before its own kill would
otherwise leave the run, in a session of its own, alive after pytest.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from tests.cli_process import start_cli

_started: list[RunProcess] = []


class RunProcess:
    """One `contraflow run FLOW --data-dir DIR --no-api --no-status --spu-port 0` in the background
    (`api`: serve the REST API there instead of `--no-api`)."""

    def __init__(
        self,
        flow: Path,
        data_dir: Path,
        cwd: Path,
        log: Path,
        *extra_args: str,
        env: dict[str, str] | None = None,
        api: str | None = None,
    ) -> None:
        self.log = log
        with log.open("ab") as out:
            self.process = start_cli(
                "run",
                flow,
                "--data-dir",
                data_dir,
                *(("--api", api) if api else ("--no-api",)),
                "--no-status",
                "--spu-port",
                "0",
                *extra_args,
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        _started.append(self)

    def wait_until(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if self.process.poll() is not None:
                raise AssertionError(
                    f"contraflow run exited ({self.process.returncode}) before {what}:\n{self.tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"timed out after {timeout_s}s waiting for {what}:\n{self.tail()}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL the runtime and everything it started (Spark's JVM, Python workers)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def terminate(self, timeout_s: float = 120) -> int:
        """SIGTERM the runtime only (it quiesces and stops its children) and wait for its exit code."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
            else:  # leftovers of the group (a JVM that outlived it) must not hold the data dir
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)

    def running(self) -> bool:
        """The flows are deployed (the command said so)."""
        return "Ctrl-C drains and stops" in self.log.read_text(errors="replace")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def kill_leftovers() -> None:
    """SIGKILL the process group of every run started since the last call that is still running."""
    while _started:
        _started.pop().kill()
