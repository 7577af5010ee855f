"""Crash recovery: torn and corrupt tails are cut to the last good batch, indexes are
rebuilt, corruption inside closed segments is reported with its position."""

from __future__ import annotations

import struct
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_helpers import read_all, read_until_error, snapshot

from contraflow.spu.protocol.compression import Compression
from contraflow.spu.protocol.topics import FlushPolicy, TopicConfig
from contraflow.spu.storage.errors import CorruptSegmentError
from contraflow.spu.storage.partition import Partition
from contraflow.spu.storage.recovery import RecoveryPoint

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
        hole: tuple[int, int] | None = None  # offsets a flip made unreadable, intact data after them
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
            i, (start, end, first) = next((i, s) for i, s in enumerate(spans) if s[0] <= pos < s[1])
            if pos - start not in UNCOVERED_EPOCH:
                if end == size:
                    survivors = first  # a bad tail is cut
                else:
                    hole = (first, spans[i + 1][2])  # a bad batch between intact ones is kept as a hole
        else:
            (crashed / active.index_path.name).unlink()

        recovered = open_partition(crashed)
        if hole is not None:
            before, error = read_until_error(recovered)
            assert [v for _, v in before] == written[: hole[0]], "everything before the bad batch is served"
            assert error is not None and f"at offset {hole[0]}" in str(error)
            after = read_all(recovered, hole[1])
            assert [v for _, v in after] == written[hole[1] :], "intact batches after it are kept"
            assert recovered.log_end_offset == survivors
            recovered.close()
            return
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
    torn = log_file.read_bytes()
    report = open_partition(crashed).recovery
    assert not report.clean_shutdown
    [cut] = report.truncated
    assert cut.segment == log_file and cut.bytes_removed == size - 3 - cut.position
    assert "torn" in cut.reason
    assert "cut a torn tail" in str(report) and f"{cut.bytes_removed} bytes" in str(report)
    assert cut.quarantine is not None and cut.quarantine.parent == crashed
    assert cut.quarantine.read_bytes() == torn[cut.position :], "the cut bytes are kept beside the segment"


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
    directory, written = _closed_and_reopened(tmp_path)
    log_file = directory / f"{0:020d}.log"
    part = open_partition(directory)
    victim_pos, victim = list(part.segments[0].headers_from(0))[2]
    part.close()
    raw = bytearray(log_file.read_bytes())
    raw[victim_pos + victim.total_size - 1] ^= 0x55
    log_file.write_bytes(bytes(raw))

    scrubbed = open_partition(directory)  # the index still checks out, so open succeeds...
    damage = scrubbed.verify()  # ...and a scrub finds it, naming offset, segment and bytes
    end = victim_pos + victim.total_size
    assert damage == [
        f"offset {victim.base_offset}: CRC32C mismatch (segment {log_file}, bytes {victim_pos}..{end})"
    ]
    before, error = read_until_error(scrubbed)  # ...and so does every read
    assert [v for _, v in before] == written[: victim.base_offset]
    assert isinstance(error, CorruptSegmentError) and error.position == victim_pos
    assert f"t/0 at offset {victim.base_offset}: CRC32C mismatch" in str(error) and str(log_file) in str(
        error
    )
    assert scrubbed.describe().corrupt_batches == 1
    scrubbed.close()

    (directory / f"{0:020d}.index").unlink()  # an index rebuild meets it on open: a hole, not a cut
    rebuilt = open_partition(directory)
    [(path, hole)] = rebuilt.recovery.holes
    assert (path, hole.start, hole.first_offset) == (log_file, victim_pos, victim.base_offset)
    assert [v for _, v in read_all(rebuilt, victim.next_offset)] == written[victim.next_offset :]
    with pytest.raises(CorruptSegmentError, match=f"at offset {victim.base_offset}"):
        rebuilt.read(victim.base_offset)


def test_segment_rolled_after_the_last_checkpoint_is_scanned(tmp_path: Path) -> None:
    """Recovery starts at the recovery point, so damage in a segment rolled after it is
    found; intact segments after the damage are kept (a hole, not a cut)."""
    live = tmp_path / "live"
    part = open_partition(live)
    for i in range(40):
        part.append_records([b"x" * 50, b"%d" % i])
    segments = len(part.segments)
    crashed = snapshot(live, tmp_path / "crashed")
    (crashed / "recovery-point").write_text("0\n")
    second = crashed / part.segments[1].log_path.name
    last_pos, last = list(part.segments[1].headers_from(0))[-1]
    raw = bytearray(second.read_bytes())
    raw[-1] ^= 1
    second.write_bytes(bytes(raw))
    recovered = open_partition(crashed)
    assert recovered.log_end_offset == 80, "nothing after the bad batch was cut"
    assert len(recovered.segments) == segments and not recovered.recovery.deleted_segments
    [(path, hole)] = recovered.recovery.holes
    assert (path, hole.start, hole.first_offset, hole.next_offset) == (
        second,
        last_pos,
        last.base_offset,
        last.next_offset,
    )
    assert recovered.recovery.scanned_segments == segments, "from the recovery point to the end"
    with pytest.raises(CorruptSegmentError, match=f"offset {last.base_offset}"):
        recovered.read(last.base_offset)


def test_torn_tail_after_a_clean_shutdown_loses_only_the_torn_batch(tmp_path: Path) -> None:
    """Issue 17 #4: the clean-shutdown marker is not trusted over the files."""
    directory = tmp_path / "p"
    part = Partition(directory, "t", 0, TopicConfig(flush=FlushPolicy.never()))
    for b in range(100):
        part.append_records([b"%d-%d" % (b, i) for i in range(10)])
    part.close()
    log_file = directory / f"{0:020d}.log"
    with open(log_file, "r+b") as f:
        f.truncate(log_file.stat().st_size - 7)
    files = {p.name: p.read_bytes() for p in directory.iterdir()}

    reader = Partition(directory, "t", 0, TopicConfig(), writable=False)
    assert reader.recovery.distrusted_marker is not None
    assert len(read_all(reader)) == 990 and reader.log_end_offset == 990
    reader.close()
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == files, "a read-only open writes nothing"

    writer = Partition(directory, "t", 0, TopicConfig())
    assert len(read_all(writer)) == 990 and writer.high_watermark == 990
    [cut] = writer.recovery.truncated
    assert cut.data_loss and cut.first_offset == 990 and cut.records == 10
    assert cut.quarantine is not None and cut.quarantine.read_bytes() == files[log_file.name][cut.position :]
    writer.close()
    assert (directory / "high-watermark").read_text() == "990\n"


def test_recovery_point_moves_with_fsyncs_so_a_crash_rescans_only_the_rest(tmp_path: Path) -> None:
    live = tmp_path / "live"
    part = Partition(live, "t", 0, TopicConfig(flush=FlushPolicy.every_batch()))
    for b in range(60):  # ~6 MiB in one segment, fsynced batch by batch
        part.append_records([b"%04d" % b + b"x" * 1020] * 100)
    crashed = snapshot(live, tmp_path / "crashed")
    point = RecoveryPoint.read(crashed / "recovery-point")
    assert point.segment_base == 0 and point.position is not None and point.position >= 4 << 20
    spans = list(part.segments[-1].headers_from(0))
    victim_pos, victim = next(s for s in spans if s[0] > 1 << 20)  # inside the checkpointed prefix
    tail_pos, tail = spans[-1]
    assert tail_pos >= point.position
    log_file = crashed / f"{0:020d}.log"
    raw = bytearray(log_file.read_bytes())
    raw[victim_pos + 200] ^= 1
    raw[tail_pos + 200] ^= 1  # after the recovery point: found by the scan and cut
    log_file.write_bytes(bytes(raw))

    recovered = open_partition_with(crashed, TopicConfig())
    assert not recovered.recovery.holes, "the checkpointed prefix was not rescanned"
    [cut] = recovered.recovery.truncated
    assert cut.position == tail_pos and recovered.log_end_offset == tail.base_offset
    with pytest.raises(CorruptSegmentError, match=f"at offset {victim.base_offset}: CRC32C mismatch"):
        recovered.read(victim.base_offset)  # ...yet reads still check it


def open_partition_with(directory: Path, config: TopicConfig) -> Partition:
    return Partition(directory, "t", 0, config)


def test_recovery_point_moves_under_concurrent_appends(tmp_path: Path) -> None:
    """Group commit: a flush covers what other appenders wrote meanwhile; the recovery point
    still moves (to what that fsync covered), not only when appends pause."""
    part = Partition(tmp_path / "p", "t", 0, TopicConfig(flush=FlushPolicy.every_batch()))

    def append() -> None:
        for b in range(30):
            part.append_records([b"%04d" % b + b"y" * 1020] * 100)

    writers = [threading.Thread(target=append) for _ in range(3)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    point = RecoveryPoint.read(tmp_path / "p" / "recovery-point")
    assert point.position is not None and point.position >= 4 << 20
    assert point.offset <= part.log_end_offset
    part.close()
