"""CRC checks remembered across processes within one boot (`storage/boot_checks.py`):
a clean close records what was checked; the next open trusts it only for files
that are unchanged since, and never after a reboot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from storage_helpers import read_all, read_until_error

from contraflow.spu.protocol.topics import FlushPolicy, TopicConfig
from contraflow.spu.storage import boot_checks
from contraflow.spu.storage.errors import CorruptSegmentError
from contraflow.spu.storage.partition import Partition

CONFIG = TopicConfig(segment_bytes=4096, index_interval_bytes=256, flush=FlushPolicy.never())


def open_partition(directory: Path, *, writable: bool = True) -> Partition:
    return Partition(directory, "t", 0, CONFIG, writable=writable)


def written_and_closed(directory: Path) -> list[bytes]:
    """Several segments written and closed cleanly by one process."""
    part = open_partition(directory)
    values = [f"value-{i:05d}".encode().ljust(100, b".") for i in range(300)]
    for start in range(0, len(values), 10):
        part.append_records(values[start : start + 10])
    assert len(part.segments) >= 3
    part.close()
    return values


def checked(part: Partition) -> list[bool]:
    """Per segment: are all its bytes marked as checked?"""
    return [seg.verified.covers(0, seg.size) for seg in part.segments]


def flip_keeping_mtime(path: Path, position: int) -> None:
    """Change one byte in place and put the old mtime back (the ctime still moves)."""
    before = path.stat()
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x5A]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_clean_close_spares_the_next_open_in_this_boot_the_crc_pass(tmp_path: Path) -> None:
    values = written_and_closed(tmp_path / "p")
    reader = open_partition(tmp_path / "p", writable=False)
    assert all(checked(reader)), "every byte was checked at append by the writer"
    assert [v for _, v in read_all(reader)] == values
    reader.close()


def last_byte_of_a_middle_batch(part: Partition, index: int) -> tuple[Path, int]:
    seg = part.segments[index]
    pos, header = list(seg.headers_from(0))[1]
    return seg.log_path, pos + header.total_size - 1


def test_bytes_changed_after_the_close_are_checked_again(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    values = written_and_closed(directory)
    reader = open_partition(directory, writable=False)
    damaged = {1, len(reader.segments) - 1}  # a closed segment and the active one
    flips = [last_byte_of_a_middle_batch(reader, i) for i in sorted(damaged)]
    reader.close()
    for path, position in flips:
        flip_keeping_mtime(path, position)

    reopened = open_partition(directory, writable=False)
    assert checked(reopened) == [i not in damaged for i in range(len(reopened.segments))]
    before, error = read_until_error(reopened)
    assert isinstance(error, CorruptSegmentError) and "CRC32C mismatch" in str(error)
    assert str(flips[0][0]) in str(error)
    assert [v for _, v in before] == values[: len(before)]
    assert len(before) < reopened.segments[1].next_offset
    reopened.close()


def test_after_a_reboot_every_byte_is_checked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reboot cannot happen inside a test: the boot id it would change is replaced."""
    values = written_and_closed(tmp_path / "p")
    monkeypatch.setattr(boot_checks, "boot_id", lambda: "another-boot")
    reader = open_partition(tmp_path / "p", writable=False)
    assert not any(checked(reader))
    assert [v for _, v in read_all(reader)] == values
    assert all(checked(reader)), "the first read checked them"
    reader.close()


def test_a_read_only_open_never_writes_the_record(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    written_and_closed(directory)
    (directory / boot_checks.CHECK_RECORD).unlink()
    reader = open_partition(directory, writable=False)
    read_all(reader)
    reader.close()
    assert not (directory / boot_checks.CHECK_RECORD).exists()


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"boot_id": 1}', b'{"segments": []}', b"[1, 2]"])
def test_an_unreadable_record_marks_nothing(tmp_path: Path, content: bytes) -> None:
    directory = tmp_path / "p"
    values = written_and_closed(directory)
    (directory / boot_checks.CHECK_RECORD).write_bytes(content)
    reader = open_partition(directory, writable=False)
    assert not any(checked(reader))
    assert [v for _, v in read_all(reader)] == values
    reader.close()


def test_checks_of_rolled_segments_survive_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer never closes (what a SIGKILL leaves on disk): each roll recorded the
    segments closed so far. (Recovery CRC-scans the active one past the recovery point.)"""
    writer = open_partition(tmp_path / "p")
    for start in range(0, 300, 10):
        writer.append_records([f"value-{i:05d}".encode().ljust(100, b".") for i in range(start, start + 10)])
    reader = open_partition(tmp_path / "p", writable=False)
    assert len(reader.segments) >= 3 and all(checked(reader))
    reader.close()
    monkeypatch.setattr(boot_checks, "boot_id", lambda: "another-boot")
    without_record = open_partition(tmp_path / "p", writable=False)
    assert checked(without_record) == [False] * (len(without_record.segments) - 1) + [True]
    without_record.close()
    writer.close()


def test_a_record_that_cannot_be_written_fails_neither_roll_nor_close(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    (directory / boot_checks.CHECK_RECORD).mkdir(parents=True)  # os.replace onto a directory fails
    values = written_and_closed(directory)
    assert (directory / ".clean-shutdown").exists()
    reader = open_partition(directory, writable=False)
    assert [v for _, v in read_all(reader)] == values
    reader.close()


def test_a_segment_changed_under_a_running_writer_is_not_recorded(tmp_path: Path) -> None:
    """The writer checked the bytes before someone else changed them: its close must not
    vouch for what is on disk now."""
    directory = tmp_path / "p"
    writer = open_partition(directory)
    for start in range(0, 300, 10):
        writer.append_records([f"value-{i:05d}".encode().ljust(100, b".") for i in range(start, start + 10)])
    flips = [last_byte_of_a_middle_batch(writer, 1)]
    flip_keeping_mtime(*flips[0])
    writer.close()

    reopened = open_partition(directory, writable=False)
    assert checked(reopened) == [i != 1 for i in range(len(reopened.segments))]
    _, error = read_until_error(reopened)
    assert isinstance(error, CorruptSegmentError) and str(flips[0][0]) in str(error)
    reopened.close()
