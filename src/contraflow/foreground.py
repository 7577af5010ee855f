"""Taking the terminal's foreground so that Ctrl-C reaches `contraflow run` alone.

Under `make run` the runtime is in make's process group, so Ctrl-C reaches
make too: make waits for the runtime to drain and then ends itself by the
same signal, status 130, whatever the runtime's own status. A process that
is in the terminal's foreground group without leading it (a command run by
make, a script, ...) therefore moves into a group of its own and makes that
the foreground: Ctrl-C reaches only the runtime (and Spark's JVM in its
group, which ignores it), and the parent sees the runtime's clean exit. On
the way out the foreground goes back to the group that had it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def own_foreground_group() -> Iterator[bool]:
    """Lead the terminal's foreground group for the duration; yields whether it moved."""
    try:
        tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:  # no controlling terminal (a service, a test): nothing to take
        yield False
        return
    try:
        previous = os.tcgetpgrp(tty)
        if previous != os.getpgrp() or os.getpgrp() == os.getpid():
            yield False  # in the background, or already leading its group (started from a shell)
            return
        os.setpgid(0, 0)
        _hand_terminal_to(tty, os.getpgrp())
        try:
            yield True
        finally:
            with contextlib.suppress(OSError):
                _hand_terminal_to(tty, previous)
    finally:
        os.close(tty)


def _hand_terminal_to(tty: int, group: int) -> None:
    """`tcsetpgrp`, which a process outside the foreground may call only while ignoring SIGTTOU."""
    before = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(tty, group)
    finally:
        signal.signal(signal.SIGTTOU, before)
