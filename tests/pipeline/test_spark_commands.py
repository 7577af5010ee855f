"""`contraflow query` and `contraflow state` as a user runs them: real subprocesses."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import orjson

from contraflow.pipeline.local import compile_query, run_local
from contraflow.pipeline.spark.state import FORMAT, import_path
from contraflow.spark.checkpoint import checkpoint_path
from tests.cli_process import run_cli, start_cli

QUERY = """
define window three_ns from tumbling with interval = 3 end;
define script checked
script
  match event of
    case %{ present v } => {"v": event.v * 10}
    default => event.missing + 1
  end
end;
create script checked;
select event from in into checked;
select {"sum": aggr::stats::sum(event.v), "n": aggr::stats::count(), "last": aggr::win::last(system::ingest_ns())}
from checked[three_ns] into out;
"""


def contraflow(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return run_cli(*args, stdin=stdin, timeout=240)  # Spark starts in the child: minutes under load


def test_query_prints_out_events_as_json_lines_like_the_local_runner(tmp_path: Path) -> None:
    query = tmp_path / "sums.trickle"
    query.write_text(QUERY)
    lines = [b'{"v": 1}', b'{"v": 2}', b'{"x": 0}', b'{"v": 3}', b"", b'{"v": 4}', b'{"v": 5}', b'{"v": 6}']
    result = contraflow("query", str(query), "--ingest-ns", "index", stdin=b"\n".join(lines) + b"\n")
    assert result.returncode == 0, result.stderr.decode()
    expected = run_local(compile_query(QUERY), lines, "index")
    assert result.stdout.splitlines() == [e.channel_bytes() for e in expected["out"]]
    assert [orjson.loads(line) for line in result.stdout.splitlines()] == [
        {"sum": 30, "n": 2, "last": 1},  # system::ingest_ns() is the event's ingest time: its index here
        {"sum": 120, "n": 3, "last": 5},
        {"sum": 60, "n": 1, "last": 6},
    ]
    errors = [orjson.loads(line) for line in result.stderr.splitlines()]
    assert [(e["node"], e["event"]) for e in errors] == [("checked", {"x": 0})]


def test_query_reports_a_trickle_error_in_one_line(tmp_path: Path) -> None:
    query = tmp_path / "broken.trickle"
    query.write_text("select event from nowhere into out;\n")
    result = contraflow("query", str(query), stdin=b"{}\n")
    assert result.returncode != 0
    assert result.stdout == b""
    assert b"nowhere" in result.stderr and b"Traceback" not in result.stderr


def test_state_import_waits_for_the_pipeline_and_refuses_one_that_ran(tmp_path: Path) -> None:
    snapshot = {"format": FORMAT, "batch": 3, "keys": {"": {"counter": 41}}}
    file = tmp_path / "state.json"
    file.write_bytes(orjson.dumps(snapshot))
    data_dir = tmp_path / "data"
    result = contraflow("state", "import", "main", "counting", str(file), "--data-dir", str(data_dir))
    assert result.returncode == 0, result.stderr.decode()
    waiting = import_path(checkpoint_path(data_dir, "main", "counting"))
    assert orjson.loads(waiting.read_bytes()) == snapshot

    commits = checkpoint_path(data_dir, "main", "ran") / "commits"
    commits.mkdir(parents=True)
    (commits / "0").write_text("v1\n{}")
    refused = contraflow("state", "import", "main", "ran", str(file), "--data-dir", str(data_dir))
    assert refused.returncode != 0
    assert refused.stderr.decode().startswith("error: ") and "already has state" in refused.stderr.decode()


def test_state_import_rejects_a_file_that_is_not_a_snapshot(tmp_path: Path) -> None:
    file = tmp_path / "state.json"
    file.write_text('{"keys": 1}')
    result = contraflow("state", "import", "main", "p", str(file), "--data-dir", str(tmp_path))
    assert result.returncode != 0 and b"not a pipeline state snapshot" in result.stderr


def test_query_killed_by_sigterm_removes_its_temporary_directory(tmp_path: Path) -> None:
    query = tmp_path / "pass.trickle"
    query.write_text("select event from in into out;\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    process = start_cli(
        "query",
        str(query),
        env={"TMPDIR": str(temp)},
        stdin=subprocess.PIPE,  # left open: the query waits for the rest of its input
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(temp.glob("contraflow-query-*/spark")):  # Spark is starting
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 128 + signal.SIGTERM, stderr.decode()
        assert b"Traceback" not in stderr
        assert list(temp.glob("contraflow-query-*")) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # Spark's JVM, wherever it got to
        process.wait()
