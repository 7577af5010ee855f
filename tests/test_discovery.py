"""The log commands without --spu/--data-dir find the runtime running from the same directory,
or its log files when none runs (real SPU, real files, the CLI as a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from contraflow.discovery import (
    RuntimeInfo,
    log_dir,
    remove_runtime_info,
    running_runtime,
    write_runtime_info,
)
from contraflow.spu.api import LocalLog
from contraflow.spu.embedded import EmbeddedSpu
from tests.cli_process import run_cli


def cli(cwd: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The command as a user runs it from `cwd`: no --spu, no --data-dir, none in the environment."""
    return run_cli(*args, cwd=cwd, stdin=stdin, clean=True)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_while_a_runtime_runs_the_commands_go_through_its_spu(tmp_path: Path) -> None:
    data = tmp_path / "contraflow-data"
    with EmbeddedSpu(data / "spu", mode="thread") as spu:  # holds the log's write lock, like `run`
        write_runtime_info(data, RuntimeInfo(os.getpid(), spu.addr, "127.0.0.1:9898"))
        created = cli(tmp_path, "topic", "create", "edges")
        produced = cli(tmp_path, "produce", "edges", stdin="one\ntwo\n")
        listed = cli(tmp_path, "topic", "list")
        consumed = cli(tmp_path, "consume", "edges", "-B", "-d")
        remove_runtime_info(data)
    assert created.returncode == 0, created.stderr
    assert produced.returncode == 0, produced.stderr  # a local write would find the log locked
    assert listed.stdout.splitlines() == ["edges"]
    assert consumed.stdout.splitlines() == ["one", "two"]
    assert not (data / "runtime.json").exists()


def test_after_the_runtime_stopped_or_died_they_read_its_log_files(tmp_path: Path) -> None:
    data = tmp_path / "contraflow-data"
    log = LocalLog(data / "spu")
    log.create_topic("flow.source.out")
    log.produce("flow.source.out", 0, [b'{"n":1}', b'{"n":2}'])
    log.close()
    write_runtime_info(data, RuntimeInfo(dead_pid(), "127.0.0.1:1", None))  # what kill -9 leaves
    assert running_runtime(data) is None
    assert log_dir(data) == data / "spu"
    listed = cli(tmp_path, "topic", "list")
    consumed = cli(tmp_path, "consume", "flow.source.out", "-B", "-d")
    assert listed.stdout.splitlines() == ["flow.source.out"], listed.stderr
    assert consumed.stdout.splitlines() == ['{"n":1}', '{"n":2}'], consumed.stderr


def test_a_plain_log_directory_is_used_as_it_is(tmp_path: Path) -> None:
    log = LocalLog(tmp_path / "contraflow-data")
    log.create_topic("spu")  # a topic may even be called like the runtime's subdirectory
    log.close()
    assert log_dir(tmp_path / "contraflow-data") == tmp_path / "contraflow-data"
    assert cli(tmp_path, "topic", "list").stdout.splitlines() == ["spu"]
