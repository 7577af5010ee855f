"""A writer killed with SIGKILL loses nothing it acknowledged, and the log reopens cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from storage_helpers import read_all
from tests.cli_process import child_env

from contraflow.spu.storage.store import Store

WRITER = textwrap.dedent(
    """
    import sys
    from contraflow.spu.protocol.topics import FlushPolicy, TopicConfig
    from contraflow.spu.storage.store import Store

    store = Store(sys.argv[1])
    store.create_topic("t", TopicConfig(segment_bytes=4096, flush=FlushPolicy.every_batch()))
    part = store.partition("t", 0)
    n = 0
    while True:
        values = [b"rec-%d" % (n + i) for i in range(5)]
        first, last = part.append_records(values)
        assert first == n
        n = last + 1
        print(last, flush=True)  # acknowledged: durable per the flush policy
    """
)


def test_sigkill_during_appends_keeps_every_acknowledged_record(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert child.stdout is not None
    acked = -1
    for _ in range(300):
        line = child.stdout.readline()
        assert line, "writer died early"
        acked = int(line)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    with Store(tmp_path) as store:  # the dead writer's lock is gone with it
        part = store.partition("t", 0)
        assert not part.recovery.clean_shutdown
        assert len(part.segments) > 1
        got = read_all(part)
        assert len(got) > acked, "every acknowledged record survived"
        assert got == [(i, b"rec-%d" % i) for i in range(len(got))], "a dense prefix, every record intact"
        end = part.log_end_offset
        part.append_records([b"after"])
    with Store(tmp_path) as store:
        part = store.partition("t", 0)
        assert part.recovery.clean_shutdown
        assert read_all(part, end) == [(end, b"after")]
