"""Checking ahead of readers: the background scrubber (`storage/scrub.py`), the SPU running
it at start-up, and `contraflow topic verify` (a scrub from the command line)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from storage_helpers import read_all, read_until_error
from test_storage_boot_checks import checked, flip_keeping_mtime, last_byte_of_a_middle_batch
from tests.cli_process import run_cli
from tests.spu.spu_harness import running_spu

from contraflow.spu.api import read_topic
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol.topics import FlushPolicy, TopicConfig
from contraflow.spu.storage import boot_checks
from contraflow.spu.storage.errors import CorruptSegmentError
from contraflow.spu.storage.ranges import RangeSet
from contraflow.spu.storage.scrub import Scrubber
from contraflow.spu.storage.store import Store

CONFIG = TopicConfig(partitions=2, segment_bytes=4096, index_interval_bytes=256, flush=FlushPolicy.never())


def written_cold(data_dir: Path) -> list[bytes]:
    """A topic `t` of two partitions, several segments each, closed cleanly and then with
    no CRC check on record (as after a reboot)."""
    values = [f"value-{i:05d}".encode().ljust(100, b".") for i in range(300)]
    with Store(data_dir) as store:
        store.create_topic("t", CONFIG)
        for p in range(2):
            part = store.partition("t", p)
            for start in range(0, len(values), 10):
                part.append_records(values[start : start + 10])
    for record in data_dir.glob(f"topics/t/*/{boot_checks.CHECK_RECORD}"):
        record.unlink()
    return values


def test_the_scrubber_checks_every_partition_ahead_of_reads_and_records_it(tmp_path: Path) -> None:
    values = written_cold(tmp_path)
    with Store(tmp_path) as store:
        assert not any(checked(store.partition("t", 0))), "nothing on record: reads would check it all"
        scrubber = Scrubber(store, step_bytes=1024)
        assert scrubber.scrub_all() == 2
        for p in range(2):
            part = store.partition("t", p)
            assert all(checked(part))
            assert (
                part.stats.scrubbed_bytes
                == sum(seg.size for seg in part.segments)
                == scrubber.checked_bytes / 2
            )
            assert (part.directory / boot_checks.CHECK_RECORD).exists(), "recorded for the next open"
        assert Scrubber(store).scrub_all() == 2 and store.partition("t", 0).stats.scrubbed_bytes == (
            scrubber.checked_bytes / 2
        ), "a second pass finds nothing left to check"
    with Store(tmp_path, read_only=True) as reader:
        part = reader.partition("t", 1)
        assert all(checked(part)), "the next open in this boot takes the scrubber's record"
        assert [v for _, v in read_all(part)] == values


def test_a_bad_batch_the_scrubber_finds_is_counted_once_and_reads_still_refuse_it(tmp_path: Path) -> None:
    values = written_cold(tmp_path)
    with Store(tmp_path, read_only=True) as probe:
        path, position = last_byte_of_a_middle_batch(probe.partition("t", 0), 1)
    flip_keeping_mtime(path, position)
    with Store(tmp_path) as store:
        Scrubber(store).scrub_all()
        part = store.partition("t", 0)
        info = part.describe()
        assert info.corrupt_batches == 1 and any("CRC32C mismatch" in line for line in info.damage)
        assert [seg.verified.covers(0, seg.size) for seg in part.segments][1] is False
        assert all(c for i, c in enumerate(checked(part)) if i != 1), "the other segments were scrubbed"
        before, error = read_until_error(part)
        assert isinstance(error, CorruptSegmentError) and str(path) in str(error)
        assert [v for _, v in before] == values[: len(before)] and len(before) < len(values)
        assert part.describe().corrupt_batches == 1, "the read met the same batch: still one"


def test_the_spu_scrubs_an_existing_log_at_start_up(tmp_path: Path) -> None:
    values = written_cold(tmp_path)
    records = [tmp_path / "topics" / "t" / str(p) / boot_checks.CHECK_RECORD for p in range(2)]
    with running_spu(tmp_path) as spu:
        deadline = time.monotonic() + 30
        while not all(r.exists() for r in records) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(r.exists() for r in records), "no client asked: the scrubber checked and recorded"
        for record in records:
            segments = json.loads(record.read_bytes())["segments"]
            sizes = {int(s.stem): s.stat().st_size for s in record.parent.glob("*.log")}
            assert {int(b): e["ranges"] for b, e in segments.items()} == {
                b: [[0, size]] for b, size in sizes.items()
            }
        with SpuClient(spu.addr) as client:
            assert [r.value for r in read_topic(client, "t")] == values * 2


def _digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_topic_verify_names_each_bad_batch_and_writes_nothing(tmp_path: Path) -> None:
    written_cold(tmp_path)
    env = {"CONTRAFLOW_DATA_DIR": str(tmp_path)}
    intact = run_cli("topic", "verify", "t", env=env)
    assert intact.returncode == 0, intact.stderr
    assert [line.split(":")[0] for line in intact.stdout.splitlines()] == ["t/0", "t/1"]
    assert all(line.endswith(": ok") for line in intact.stdout.splitlines())

    with Store(tmp_path, read_only=True) as probe:
        part = probe.partition("t", 1)
        path, position = last_byte_of_a_middle_batch(part, len(part.segments) - 1)  # the active segment
    flip_keeping_mtime(path, position)
    before = _digest(tmp_path)
    damaged = run_cli("topic", "verify", "t", "--partition", "1", env=env)
    assert damaged.returncode == 1, "damage has its own exit status"
    assert "1 bad stretch(es)" in damaged.stderr and "Traceback" not in damaged.stderr
    lines = damaged.stdout.splitlines()
    assert lines[0].startswith("t/1: offsets 0..299") and lines[0].endswith(": 1 bad")
    assert "CRC32C mismatch" in lines[1] and str(path) in lines[1] and "offset " in lines[1]
    assert _digest(tmp_path) == before, "a verify opens read-only and writes nothing"
    missing = run_cli("topic", "verify", "t", "--partition", "5", env=env)
    assert missing.returncode == 2 and "has no partition 5" in missing.stderr
    unknown = run_cli("topic", "verify", "nope", env=env)
    assert unknown.returncode == 2 and "nope" in unknown.stderr
    assert "1 damage found, 2 bad input" in run_cli("topic", "verify", "--help").stdout.replace("\n", " ")


def test_first_gap_is_where_a_scrub_resumes() -> None:
    ranges = RangeSet()
    assert ranges.first_gap(100) == 0 and ranges.first_gap(0) is None
    ranges.add(0, 40)
    ranges.add(60, 100)
    assert ranges.first_gap(100) == 40
    assert ranges.first_gap(100, 50) == 50 and ranges.first_gap(100, 70) is None
    ranges.add(40, 60)
    assert ranges.first_gap(100) is None and ranges.first_gap(120) == 100
