"""`contraflow run` refuses a taken port, an unwritable data directory or a missing Java in one
line, before Spark starts (no log file, no JVM)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from contraflow.preflight import java_major
from tests.cli_process import run_cli

FLOW = """
define flow main
flow
  define connector ticks from metronome with config = {"interval": 1000000} end;
  define connector out from file with config = {"path": "out.jsonl", "mode": "append"} end;
  define pipeline pass pipeline select event from in into out; end;
  create connector ticks;
  create connector out;
  create pipeline pass;
  connect /connector/ticks to /pipeline/pass;
  connect /pipeline/pass to /connector/out;
end;
deploy flow main;
"""


@contextmanager
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "flow.troy").write_text(FLOW)
    return run_cli("run", "flow.troy", *args, cwd=tmp_path, env=env)


def assert_refused_before_spark(tmp_path: Path, done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: ") and all(w in done.stderr for w in words), done.stderr
    assert not (tmp_path / "contraflow-data" / "logs").exists()


def test_a_taken_api_port(tmp_path: Path) -> None:
    with taken_port() as port:
        done = run(tmp_path, "--api", f"127.0.0.1:{port}", "--spu-port", "0")
    assert_refused_before_spark(tmp_path, done, "REST API", str(port), "--api")


def test_a_taken_spu_port(tmp_path: Path) -> None:
    with taken_port() as port:
        done = run(tmp_path, "--no-api", "--spu-port", str(port))
    assert_refused_before_spark(tmp_path, done, "SPU", str(port), "--spu-port")


def test_a_data_dir_that_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file, not a directory")
    done = run(tmp_path, "--no-api", "--spu-port", "0", "--data-dir", "taken/data")
    assert_refused_before_spark(tmp_path, done, "data directory", "--data-dir")


def test_no_java(tmp_path: Path) -> None:
    done = run(tmp_path, "--no-api", "--spu-port", "0", env={"JAVA_HOME": str(tmp_path / "no-jdk")})
    assert_refused_before_spark(tmp_path, done, "JAVA_HOME", "Java 17")


@pytest.mark.parametrize(("version", "major"), [("17.0.15", 17), ("21", 21), ("1.8.0_392", 8), ("22-ea", 22)])
def test_java_versions(version: str, major: int) -> None:
    assert java_major(version) == major


def test_an_old_java(tmp_path: Path) -> None:
    jdk = tmp_path / "jdk11"
    (jdk / "bin").mkdir(parents=True)
    (jdk / "bin" / "java").write_text("#!/bin/sh\nexit 1\n")
    (jdk / "bin" / "java").chmod(0o755)
    (jdk / "release").write_text('IMPLEMENTOR="test"\nJAVA_VERSION="11.0.2"\n')
    done = run(tmp_path, "--no-api", "--spu-port", "0", env={"JAVA_HOME": str(jdk)})
    assert_refused_before_spark(tmp_path, done, "Java 17 or newer", "11.0.2")
