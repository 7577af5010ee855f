"""`end_launch` ends the JVM a session start launches, and no other (`contraflow.spark.gateway_launch`).

Real child processes carrying PySpark's launch mark stand for the JVMs: one there before the
start began (another session of this process, as a test suite's is) and one launched after.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from concurrent.futures import Future

from contraflow.spark.gateway_launch import LAUNCH_MARK, end_launch, launching_gateways

MARKED = os.environ | {LAUNCH_MARK.decode().rstrip("="): "/tmp/conn-info"}


def marked_child() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"], env=MARKED)


def test_a_stop_ends_the_launch_begun_after_the_start_and_spares_an_earlier_session() -> None:
    earlier = marked_child()
    try:
        spare = frozenset(launching_gateways())
        assert earlier.pid in spare
        later = marked_child()
        start: Future[None] = Future()
        # The start fails once its JVM is gone, as PySpark's does when the gateway exits.
        threading.Thread(target=lambda: (later.wait(), start.set_result(None)), daemon=True).start()
        assert end_launch(start, spare, timeout_s=30) is True
        assert later.wait(5) == -signal.SIGTERM
        assert earlier.poll() is None  # the running session's JVM is left alone
    finally:
        earlier.kill()
        earlier.wait()
