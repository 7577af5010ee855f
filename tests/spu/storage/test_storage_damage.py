"""Issue 17: damaged logs, as a failing disk leaves them, through the commands a user runs
(real files, real bytes, real `contraflow` processes, SIGKILL for crashes)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from tests.cli_process import run_cli
from tests.spu.spu_harness import spu_process

from contraflow.spu.protocol.batch import BatchHeader

PARTITION = Path("topics") / "t1" / "0"
FIRST_SEGMENT = f"{0:020d}.log"


def cli(data_dir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, stdin=stdin, env={"CONTRAFLOW_DATA_DIR": str(data_dir)}, timeout=120)


def ok(data_dir: Path, *args: str, stdin: str | None = None) -> str:
    result = cli(data_dir, *args, stdin=stdin)
    assert result.returncode == 0, result.stderr
    return result.stdout


def batch_spans(log_file: Path) -> list[tuple[int, BatchHeader]]:
    """(position, header) of every batch in a segment file."""
    raw = log_file.read_bytes()
    spans, pos = [], 0
    while pos < len(raw):
        header = BatchHeader.parse(raw, pos)
        spans.append((pos, header))
        pos += header.total_size
    return spans


def flip(path: Path, position: int, count: int = 64) -> None:
    raw = bytearray(path.read_bytes())
    for i in range(position, position + count):
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))


def produce_lines(data_dir: Path, count: int, *target: str) -> list[str]:
    lines = [f"event-{i:06d}" for i in range(count)]
    ok(data_dir, "produce", "t1", *target, stdin="\n".join(lines) + "\n")
    return lines


def test_torn_tail_after_a_clean_shutdown_loses_only_the_torn_batch(tmp_path: Path) -> None:
    ok(tmp_path, "topic", "create", "t1")
    lines = produce_lines(tmp_path, 100_000)
    log_file = tmp_path / PARTITION / FIRST_SEGMENT
    last_pos, last = batch_spans(log_file)[-1]
    with open(log_file, "r+b") as f:
        f.truncate(log_file.stat().st_size - 7)
    files = {p.name: p.read_bytes() for p in (tmp_path / PARTITION).iterdir()}

    consumed = cli(tmp_path, "consume", "t1", "-B", "-d")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == lines[: last.base_offset], "only the torn batch is missing"
    assert "DATA LOSS" in consumed.stderr and f"from offset {last.base_offset}" in consumed.stderr
    describe = ok(tmp_path, "topic", "describe", "t1")
    assert f"{last.base_offset}" in describe.splitlines()[7], describe
    assert {p.name: p.read_bytes() for p in (tmp_path / PARTITION).iterdir()} == files, (
        "read-only opens write nothing"
    )

    with spu_process(tmp_path) as (_, addr):
        served = ok(tmp_path, "consume", "t1", "-B", "-d", "--spu", addr).splitlines()
        assert served == lines[: last.base_offset]
    assert (tmp_path / PARTITION / "high-watermark").read_text() == f"{last.base_offset}\n"
    assert (tmp_path / PARTITION / "recovery-point").read_text().split()[0] == str(last.base_offset)
    [quarantine] = (tmp_path / PARTITION).glob("*.quarantine")
    assert quarantine.read_bytes() == files[FIRST_SEGMENT][last_pos:], "the cut bytes are kept"


def write_log(data_dir: Path, count: int, *, crash: bool) -> list[str]:
    """Produce `count` lines into t1: through a directory (closed cleanly), or through an SPU
    that is then SIGKILLed."""
    if not crash:
        return produce_lines(data_dir, count)
    with spu_process(data_dir) as (proc, addr):
        lines = produce_lines(data_dir, count, "--spu", addr)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert not (data_dir / PARTITION / ".clean-shutdown").exists()
    return lines


@pytest.mark.parametrize("crash", [False, True], ids=["offline", "after-sigkill"])
@pytest.mark.parametrize("segment", ["closed", "active"])
def test_flipped_bytes_are_reported_never_served(tmp_path: Path, segment: str, crash: bool) -> None:
    size = "64KiB" if segment == "closed" else "1GiB"
    ok(tmp_path, "topic", "create", "t1", "--segment-size", size)
    lines = write_log(tmp_path, 20_000, crash=crash)
    log_file = tmp_path / PARTITION / FIRST_SEGMENT
    spans = batch_spans(log_file)
    rolled = (tmp_path / PARTITION / f"{spans[-1][1].next_offset:020d}.log").exists()
    assert rolled == (segment == "closed")
    victim_pos, victim = spans[len(spans) // 2]
    flip(log_file, victim_pos + victim.total_size // 2)

    consumed = cli(tmp_path, "consume", "t1", "-B", "-d")
    assert consumed.returncode != 0
    assert consumed.stdout.splitlines() == lines[: victim.base_offset], (
        "no garbage, nothing after the bad batch"
    )
    error = consumed.stderr.strip().splitlines()[-1]
    assert f"t1/0 at offset {victim.base_offset}" in error and str(log_file) in error and "CRC32C" in error

    with spu_process(tmp_path) as (_, addr):
        remote = cli(tmp_path, "consume", "t1", "-B", "-d", "--spu", addr)
        assert remote.returncode != 0 and remote.stdout.splitlines() == lines[: victim.base_offset]
        assert f"t1/0 at offset {victim.base_offset}" in remote.stderr
        describe = ok(tmp_path, "topic", "describe", "t1", "--spu", addr)
        assert "1 corrupt batch" in describe
        after = ok(tmp_path, "consume", "t1", "--offset", str(victim.next_offset), "-d", "--spu", addr)
        assert after.splitlines() == lines[victim.next_offset :], "intact data after it is still served"


def test_a_bad_tail_after_sigkill_is_cut_into_quarantine(tmp_path: Path) -> None:
    ok(tmp_path, "topic", "create", "t1")
    lines = write_log(tmp_path, 30_000, crash=True)
    log_file = tmp_path / PARTITION / FIRST_SEGMENT
    spans = batch_spans(log_file)
    middle_pos, middle = spans[len(spans) // 2]
    last_pos, last = spans[-1]
    flip(log_file, middle_pos + 100)
    flip(log_file, last_pos + 100)
    damaged = log_file.read_bytes()

    consumed = cli(tmp_path, "consume", "t1", "-B", "-d")
    assert consumed.returncode != 0 and consumed.stdout.splitlines() == lines[: middle.base_offset]
    assert f"t1/0 at offset {middle.base_offset}" in consumed.stderr

    with spu_process(tmp_path) as (_, addr):
        remote = cli(tmp_path, "consume", "t1", "-B", "-d", "--spu", addr)
        assert remote.returncode != 0 and remote.stdout.splitlines() == lines[: middle.base_offset]
        rest = ok(tmp_path, "consume", "t1", "--offset", str(middle.next_offset), "-d", "--spu", addr)
        assert rest.splitlines() == lines[middle.next_offset : last.base_offset]
        describe = ok(tmp_path, "topic", "describe", "t1", "--spu", addr)
        assert f"offsets {middle.base_offset}..{middle.next_offset - 1} unreadable" in describe
        # past the last persisted recovery point, so not known to be committed: reported as a cut tail
        assert (
            f"cut a torn tail of {FIRST_SEGMENT} at byte {last_pos} from offset {last.base_offset}"
            in describe
        )
    [quarantine] = (tmp_path / PARTITION).glob("*.quarantine")
    assert quarantine.read_bytes() == damaged[last_pos:], "the cut tail is kept beside the segment"
