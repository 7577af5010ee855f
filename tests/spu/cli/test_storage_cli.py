"""`contraflow topic|produce|consume` as a user runs them (real subprocesses)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from tests.cli_process import run_cli, start_cli


def run(data_dir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, stdin=stdin, env={"CONTRAFLOW_DATA_DIR": str(data_dir)})


def ok(data_dir: Path, *args: str, stdin: str | None = None) -> str:
    result = run(data_dir, *args, stdin=stdin)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_produce_then_consume_round_trip(tmp_path: Path) -> None:
    ok(tmp_path, "topic", "create", "events", "--partitions", "1", "--segment-size", "2KiB")
    lines = [f"event number {i}" for i in range(300)]
    ok(tmp_path, "produce", "events", stdin="\n".join(lines) + "\n")
    assert ok(tmp_path, "consume", "events", "-B", "-d").splitlines() == lines
    assert ok(tmp_path, "consume", "events", "--offset", "295", "-d").splitlines() == lines[295:]
    assert ok(tmp_path, "consume", "events", "-d") == "", "by default consume starts at the end"
    describe = ok(tmp_path, "topic", "describe", "events")
    assert "partitions: 1" in describe and "300" in describe


def test_keys_route_by_partition_and_partition_filter(tmp_path: Path) -> None:
    ok(tmp_path, "topic", "create", "kv", "--partitions", "3")
    ok(tmp_path, "produce", "kv", "--key-separator", "=", stdin="a=1\nb=2\na=3\nc=4\na=5\n")
    everything = ok(tmp_path, "consume", "kv", "-B", "-d").splitlines()
    assert sorted(everything) == ["1", "2", "3", "4", "5"]
    per_partition = [
        ok(tmp_path, "consume", "kv", "-B", "-d", "--partition", str(p)).splitlines() for p in range(3)
    ]
    with_a = next(values for values in per_partition if "1" in values)
    assert [v for v in with_a if v in ("1", "3", "5")] == ["1", "3", "5"], "one key, one partition, in order"


def test_consume_from_time(tmp_path: Path) -> None:
    ok(tmp_path, "topic", "create", "t")
    ok(tmp_path, "produce", "t", stdin="old\n")
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    ok(tmp_path, "produce", "t", stdin="new\n")
    assert ok(tmp_path, "consume", "t", "--from-time", str(middle), "-d") == "new\n"
    assert ok(tmp_path, "consume", "t", "--from-time", "2000-01-01T00:00:00Z", "-d") == "old\nnew\n"
    assert ok(tmp_path, "consume", "t", "--from-time", "2999-01-01", "-d") == ""


def test_topic_list_and_delete(tmp_path: Path) -> None:
    ok(tmp_path, "topic", "create", "b")
    ok(tmp_path, "topic", "create", "a", "--retention-time", "12h", "--retention-bytes", "1MiB")
    assert ok(tmp_path, "topic", "list") == "a\nb\n"
    assert "retention time: 43200000 ms" in ok(tmp_path, "topic", "describe", "a")
    ok(tmp_path, "topic", "delete", "b")
    assert ok(tmp_path, "topic", "list") == "a\n"


def test_consume_tails_new_records(tmp_path: Path) -> None:
    ok(tmp_path, "topic", "create", "live")
    tail = start_cli(
        "consume", "live", "-B", env={"CONTRAFLOW_DATA_DIR": str(tmp_path)}, stdout=subprocess.PIPE, text=True
    )
    try:
        ok(tmp_path, "produce", "live", stdin="hello\nworld\n")
        assert tail.stdout is not None
        assert [tail.stdout.readline(), tail.stdout.readline()] == ["hello\n", "world\n"]
    finally:
        tail.kill()
        tail.wait()


BAD_INPUTS = [
    (("topic", "create", "bad name"), "invalid topic name"),
    (("topic", "create", "t", "--partitions", "zero"), "invalid partition count"),
    (("topic", "create", "t", "--partitions", "0"), "at least 1"),
    (("topic", "create", "t", "--retention-time", "7y"), "invalid retention time"),
    (("topic", "create", "t", "--segment-size", "lots"), "invalid segment size"),
    (("topic", "create", "exists"), "already exists"),
    (("topic", "describe", "missing"), "unknown topic 'missing'"),
    (("topic", "delete", "missing"), "unknown topic 'missing'"),
    (("produce", "missing"), "unknown topic"),
    (("consume", "missing", "-d"), "unknown topic"),
    (("consume", "exists", "--offset", "99", "-d"), "out of range"),
    (("consume", "exists", "--offset", "-1", "-d"), "invalid offset"),
    (("consume", "exists", "--from-time", "yesterday", "-d"), "invalid time"),
    (("consume", "exists", "-B", "--offset", "0", "-d"), "at most one of"),
    (("consume", "exists", "--partition", "4", "-d"), "no partition 4"),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_error_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    ok(tmp_path, "topic", "create", "exists")
    result = run(tmp_path, *args, stdin="")
    assert result.returncode != 0
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ") and message in line, line


def test_missing_key_separator_names_the_line(tmp_path: Path) -> None:
    ok(tmp_path, "topic", "create", "t")
    result = run(tmp_path, "produce", "t", "--key-separator", ":", stdin="a:1\nno separator here\n")
    assert result.returncode != 0
    assert result.stderr.strip() == "error: line 2 has no key separator ':'"


def test_unusable_data_dir_is_one_error_line(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    for args in (("topic", "list"), ("topic", "create", "t")):
        result = run(not_a_dir, *args)
        assert result.returncode != 0
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and str(not_a_dir) in line


def test_damaged_topic_metadata_is_one_error_line(tmp_path: Path) -> None:
    ok(tmp_path, "topic", "create", "t")
    (tmp_path / "topics" / "t" / "topic.json").write_text("{not json")
    result = run(tmp_path, "consume", "t", "-B", "-d")
    assert result.returncode != 0
    [line] = result.stderr.splitlines()
    assert line.startswith("error: unreadable topic metadata") and "topic.json" in line


def test_consume_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    ok(tmp_path, "topic", "create", "t")
    ok(tmp_path, "produce", "t", stdin="".join(f"{i:08d}\n" for i in range(50_000)))
    reader = start_cli(
        "consume",
        "t",
        "-B",
        "-d",
        env={"CONTRAFLOW_DATA_DIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    assert reader.stdout.readline() == b"00000000\n"
    reader.stdout.close()  # like `| head -1`
    assert reader.wait(timeout=60) == 0
    assert reader.stderr.read() == b""
