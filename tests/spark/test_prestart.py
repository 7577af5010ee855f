"""The pre-started Python local Spark's Python processes fork from (`contraflow.spark.prestart`):
real server, real stand-in processes, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from contraflow.spark import prestart

PROBE = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (print("got SIGTERM", flush=True), sys.exit(7)))
print(os.getpid(), os.getppid(), os.getcwd(), os.environ.get("PROBE"), sys.argv[1:], flush=True)
print(sys.stdin.readline().strip(), flush=True)
if sys.argv[1] == "wait":
    time.sleep(60)
sys.exit(int(sys.argv[1]) if sys.argv[1].isdigit() else 0)
"""


@pytest.fixture()
def probe(tmp_path: Path) -> Path:
    (tmp_path / "prestart_probe.py").write_text(PROBE)
    return tmp_path


def stand_in(probe: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    """`python -m prestart_probe ARGS` through the stand-in, with Spark's interpreter settings."""
    environ = os.environ | prestart.spark_worker_settings() | {"PYTHONPATH": str(probe), "PROBE": "yes"}
    return subprocess.Popen(
        [*prestart.client_command(), prestart.ensure_server(), "-m", "prestart_probe", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=probe,
        env=environ | env,
        text=True,
    )


def server_pid() -> int:
    server = prestart.running_server()
    assert server is not None
    return server.pid


def test_a_command_runs_forked_from_the_server_with_the_stand_ins_streams_and_environment(
    probe: Path,
) -> None:
    process = stand_in(probe, "3", "more")
    out, _ = process.communicate("a line\n", timeout=60)
    pid, parent, cwd, variable, args = out.splitlines()[0].split(" ", 4)
    assert int(parent) == server_pid() and int(pid) != process.pid
    assert (cwd, variable, args) == (str(probe), "yes", "['3', 'more']")
    assert out.splitlines()[1] == "a line"
    assert process.returncode == 3


def test_signals_to_the_stand_in_reach_the_command(probe: Path) -> None:
    process = stand_in(probe, "wait")
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("go\n")
    process.stdin.flush()
    process.stdout.readline()
    assert process.stdout.readline().strip() == "go"  # the command is in its sleep
    process.send_signal(signal.SIGTERM)
    assert process.stdout.readline().strip() == "got SIGTERM"
    assert process.wait(60) == 7


def test_a_killed_stand_in_takes_its_command_with_it(probe: Path) -> None:
    process = stand_in(probe, "wait")
    assert process.stdout is not None
    child = int(process.stdout.readline().split()[0])
    process.kill()
    process.wait()
    deadline = time.monotonic() + 30
    while alive(child):
        assert time.monotonic() < deadline, "the command outlived its stand-in"
        time.sleep(0.05)
    after = stand_in(probe, "0")  # and the server serves on
    out, _ = after.communicate("x\n", timeout=60)
    assert int(out.split()[1]) == server_pid() and after.returncode == 0


def alive(pid: int) -> bool:
    """Running (a zombie counts: the server must reap what it forked)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_other_interpreter_settings_are_declined_and_run_cold(probe: Path) -> None:
    process = stand_in(probe, "0", PYTHONHASHSEED="123")
    out, _ = process.communicate("x\n", timeout=60)
    assert int(out.split()[0]) == process.pid  # the stand-in became the interpreter itself
    assert process.returncode == 0


def grandparent(batches):  # runs in a Python worker, which forks from Spark's worker daemon
    import pyarrow as pa

    daemon = int(Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()[1])
    for _ in batches:
        yield pa.RecordBatch.from_pydict({"pid": [daemon]})


def test_local_spark_python_workers_fork_from_the_server(spark) -> None:
    found = {r.pid for r in spark.range(1).mapInArrow(grandparent, "pid long").collect()}
    assert found == {server_pid()}


def test_a_request_that_is_not_json_leaves_the_server_serving(probe: Path) -> None:
    """A broken request is that request's problem: the server (and the Spark workers forked
    from it) lives on, and the next command is still forked from it."""
    import socket

    from contraflow.spark.prestart_client import HEADER

    name = prestart.ensure_server()
    server = prestart.running_server()
    assert server is not None
    garbage = b"{not json"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as broken, open(os.devnull, "rb") as null:
        broken.connect("\0" + name)
        socket.send_fds(broken, [HEADER.pack(len(garbage))], [null.fileno()] * 3)
        broken.sendall(garbage)
        broken.settimeout(10)
        assert broken.recv(64) in (b"", b"\0" * 8), "dropped or declined, nothing else"
    assert server.poll() is None, "the server still runs"
    process = stand_in(probe, "3")
    out, _ = process.communicate("x\n", timeout=60)
    assert int(out.splitlines()[0].split(" ", 2)[1]) == server.pid
