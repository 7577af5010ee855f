"""Crash recovery: torn and corrupt tails are cut to the last good batch, indexes are
rebuilt, corruption inside closed segments is reported with its position."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import read_all, snapshot

from contraflow.spu.protocol.compression import Compression
from contraflow.spu.storage.config import FlushPolicy, TopicConfig
from contraflow.spu.storage.errors import CorruptSegmentError
from contraflow.spu.storage.partition import Partition

CONFIG = TopicConfig(segment_bytes=1024, index_interval_bytes=128, flush=FlushPolicy.never())
UNCOVERED_EPOCH = range(12, 16)  # leader_epoch is deliberately outside the CRC


def open_partition(directory: Path) -> Partition:
    return Partition(directory, "t", 0, CONFIG)


batches_strategy = st.lists(st.lists(st.binary(max_size=60), min_size=1, max_size=8), min_size=1, max_size=30)


@given(
    batches=batches_strategy,
    codec=st.sampled_from(list(Compression)),
    damage=st.sampled_from(["truncate", "flip", "lose-index"]),
    data=st.data(),
)
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_crash_recovers_an_intact_prefix(
    batches: list[list[bytes]], codec: Compression, damage: str, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        live = Path(tmp) / "live"
        part = open_partition(live)
        written: list[bytes] = []
        for values in batches:
            part.append_records(values, compression=codec)
            written += values
        active = part.segments[-1]
        # (start, end, first offset) of each batch in the active segment
        spans = [(pos, pos + h.total_size, h.base_offset) for pos, h in active.headers_from(0)]
        crashed = snapshot(live, Path(tmp) / "crashed")
        log_file = crashed / active.log_path.name
        size = log_file.stat().st_size
        survivors = active.next_offset  # records expected back
        if damage == "truncate":
            cut = data.draw(st.integers(min_value=0, max_value=size))
            with open(log_file, "r+b") as f:
                f.truncate(cut)
            survivors = next((first for start, end, first in spans if end > cut), survivors)
        elif damage == "flip" and size:
            pos = data.draw(st.integers(min_value=max(0, size - 200), max_value=size - 1))
            raw = bytearray(log_file.read_bytes())
            raw[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
            log_file.write_bytes(bytes(raw))
            start, _, first = next(span for span in spans if span[0] <= pos < span[1])
            if pos - start not in UNCOVERED_EPOCH:
                survivors = first
        else:
            (crashed / active.index_path.name).unlink()

        recovered = open_partition(crashed)
        got = read_all(recovered)
        assert [o for o, _ in got] == list(range(len(got))), "offsets stay dense from 0"
        assert [v for _, v in got] == written[:survivors], "exactly the batches before the damage survive"
        assert recovered.log_end_offset == survivors
        assert recovered.append_records([b"after"]) == (survivors, survivors)
        assert read_all(recovered, survivors) == [(survivors, b"after")]
        recovered.close()
        assert read_all(open_partition(crashed))[-1] == (survivors, b"after")


def test_recovery_report_names_the_truncation(tmp_path: Path) -> None:
    part = open_partition(tmp_path / "live")
    for i in range(5):
        part.append_records([b"v%d" % i])
    crashed = snapshot(tmp_path / "live", tmp_path / "crashed")
    log_file = crashed / part.segments[-1].log_path.name
    size = log_file.stat().st_size
    with open(log_file, "r+b") as f:
        f.truncate(size - 3)
    report = open_partition(crashed).recovery
    assert not report.clean_shutdown
    [cut] = report.truncated
    assert cut.segment == log_file and cut.bytes_removed == size - 3 - cut.position
    assert "torn" in cut.reason
    assert "truncated" in str(report)


def _closed_and_reopened(tmp_path: Path) -> tuple[Path, list[bytes]]:
    part = open_partition(tmp_path / "p")
    written = []
    for i in range(60):
        values = [b"value-%03d-%d" % (i, j) for j in range(3)]
        part.append_records(values)
        written += values
    assert len(part.segments) >= 3
    part.close()
    return tmp_path / "p", written


@pytest.mark.parametrize("damage", ["missing", "garbage-size", "wrong-position"])
def test_bad_index_of_closed_segment_is_rebuilt(tmp_path: Path, damage: str) -> None:
    directory, written = _closed_and_reopened(tmp_path)
    index = directory / f"{0:020d}.index"
    if damage == "missing":
        index.unlink()
    elif damage == "garbage-size":
        index.write_bytes(index.read_bytes() + b"xyz")
    else:
        raw = bytearray(index.read_bytes())
        rel, pos = struct.unpack_from("<II", raw, len(raw) - 8)
        struct.pack_into("<II", raw, len(raw) - 8, rel, pos + 1)
        index.write_bytes(bytes(raw))
    part = open_partition(directory)
    assert part.recovery.rebuilt_indexes == [directory / f"{0:020d}.log"]
    assert [v for _, v in read_all(part)] == written
    part.close()
    assert open_partition(directory).recovery.rebuilt_indexes == [], "the rebuilt index was persisted"


def test_corruption_inside_a_closed_segment_is_reported_not_skipped(tmp_path: Path) -> None:
    directory, _ = _closed_and_reopened(tmp_path)
    log_file = directory / f"{0:020d}.log"
    part = open_partition(directory)
    victim_pos, victim = list(part.segments[0].headers_from(0))[2]
    part.close()
    raw = bytearray(log_file.read_bytes())
    raw[victim_pos + victim.total_size - 1] ^= 0x55
    log_file.write_bytes(bytes(raw))

    scrubbed = open_partition(directory)  # the index still checks out, so open succeeds...
    with pytest.raises(CorruptSegmentError) as caught:
        scrubbed.verify()  # ...and a scrub finds it
    assert (caught.value.path, caught.value.position) == (log_file, victim_pos)
    scrubbed.close()

    (directory / f"{0:020d}.index").unlink()  # an index rebuild meets it on open
    with pytest.raises(CorruptSegmentError, match=f"{log_file} at byte {victim_pos}: CRC32C mismatch"):
        open_partition(directory)


def test_segment_rolled_after_the_last_checkpoint_is_scanned(tmp_path: Path) -> None:
    """Recovery starts at the recovery point, so a torn segment rolled after it is cut."""
    live = tmp_path / "live"
    part = open_partition(live)
    for i in range(40):
        part.append_records([b"x" * 50, b"%d" % i])
    crashed = snapshot(live, tmp_path / "crashed")
    (crashed / "recovery-point").write_text("0\n")
    second = crashed / part.segments[1].log_path.name
    raw = bytearray(second.read_bytes())
    raw[-1] ^= 1
    second.write_bytes(bytes(raw))
    recovered = open_partition(crashed)
    cut_at = part.segments[1].base_offset
    assert recovered.log_end_offset < part.segments[2].base_offset
    assert recovered.log_end_offset >= cut_at
    assert len(recovered.segments) == 2
    assert recovered.recovery.deleted_segments
    assert recovered.recovery.scanned_segments == 2, "from the recovery point up to the cut"
