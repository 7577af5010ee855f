"""Partition behaviour: appends, reads by offset and time, rolls, retention, isolation."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storage_helpers import read_all

from contraflow.spu.protocol.batch import check_batch, decode_batch, encode_batch
from contraflow.spu.protocol.errors import OffsetOutOfRangeError
from contraflow.spu.protocol.topics import FlushPolicy, TopicConfig
from contraflow.spu.storage.errors import InvalidBatchError
from contraflow.spu.storage.partition import Partition

SMALL = TopicConfig(segment_bytes=2048, index_interval_bytes=200)


def make(tmp_path: Path, config: TopicConfig = SMALL) -> Partition:
    return Partition(tmp_path / "p0", "t", 0, config)


def fill(part: Partition, batches: int, per_batch: int = 4, ts0: int = 1_000) -> list[bytes]:
    written = []
    for b in range(batches):
        values = [f"record-{b}-{i}".encode() for i in range(per_batch)]
        part.append_records(values, timestamps=[ts0 + 10 * b + i for i in range(per_batch)])
        written += values
    return written


def test_append_returns_consecutive_offsets_and_reads_round_trip(tmp_path: Path) -> None:
    part = make(tmp_path)
    assert part.append_records([b"a", b"b", b"c"]) == (0, 2)
    assert part.append_records([b"d"], keys=[b"k"]) == (3, 3)
    assert read_all(part) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    assert (part.log_start_offset, part.log_end_offset, part.high_watermark) == (0, 4, 4)


def test_read_from_every_offset_across_rolled_segments(tmp_path: Path) -> None:
    part = make(tmp_path)
    written = fill(part, 60)
    assert len(part.segments) > 3, "small segments must have rolled"
    names = sorted(p.name for p in (tmp_path / "p0").glob("*.log"))
    assert names == [f"{s.base_offset:020d}.log" for s in part.segments]
    for offset in range(0, len(written), 7):
        got = read_all(part, offset)
        assert [v for _, v in got] == written[offset:]
        assert got[0][0] == offset


def test_read_respects_max_bytes_but_returns_at_least_one_batch(tmp_path: Path) -> None:
    part = make(tmp_path)
    fill(part, 10)
    one = part.read(0, 1)
    assert len(one.batches) == 1 and one.next_offset == 4
    some = part.read(0, 3 * one.size)
    assert len(some.batches) == 3 and some.size <= 3 * one.size


def test_read_below_log_start_answers_from_log_start(tmp_path: Path) -> None:
    part = make(tmp_path, TopicConfig(segment_bytes=2048, index_interval_bytes=200, retention_bytes=1))
    fill(part, 60)
    part.enforce_retention()
    start = part.log_start_offset
    assert start > 0
    result = part.read(0, 10_000)
    assert decode_batch(result.batches[0]).base_offset == start


def test_read_past_log_end_is_out_of_range(tmp_path: Path) -> None:
    part = make(tmp_path)
    fill(part, 2)
    assert part.read(part.log_end_offset).batches == []
    with pytest.raises(OffsetOutOfRangeError, match="log end 8"):
        part.read(9)


def test_offset_for_timestamp_finds_first_record_at_or_after(tmp_path: Path) -> None:
    part = make(tmp_path)
    fill(part, 50, ts0=1_000)  # batch b, record i has timestamp 1000 + 10b + i, offset 4b + i
    assert part.offset_for_timestamp(0) == 0
    assert part.offset_for_timestamp(1_000 + 10 * 33 + 2) == 4 * 33 + 2
    assert part.offset_for_timestamp(1_000 + 10 * 33 + 5) == 4 * 34  # falls between batches
    assert part.offset_for_timestamp(10**12) is None


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path: Path) -> None:
    part = make(tmp_path)
    part.append_records([b"a", b"b"], timestamps=[500, 100])
    part.append_records([b"c"], timestamps=[300])
    assert part.offset_for_timestamp(200) == 0
    assert part.offset_for_timestamp(501) is None


def test_retention_by_bytes_never_removes_the_active_segment(tmp_path: Path) -> None:
    part = make(tmp_path, TopicConfig(segment_bytes=2048, index_interval_bytes=200, retention_bytes=1))
    written = fill(part, 80)
    part.enforce_retention()
    assert len(part.segments) == 1
    active = part.segments[0]
    assert part.log_start_offset == active.base_offset
    assert [v for _, v in read_all(part)] == written[active.base_offset :]


def test_retention_by_bytes_keeps_at_least_the_limit(tmp_path: Path) -> None:
    limit = 5000
    part = make(tmp_path, TopicConfig(segment_bytes=2048, index_interval_bytes=200, retention_bytes=limit))
    fill(part, 80)
    part.enforce_retention()
    total = part.describe().size_bytes
    assert limit <= total < limit + 2048


def test_retention_by_time_uses_the_newest_record_of_a_segment(tmp_path: Path) -> None:
    hour = 3_600_000
    part = make(tmp_path, TopicConfig(segment_bytes=2048, index_interval_bytes=200, retention_ms=hour))
    fill(part, 60, ts0=time.time_ns() // 1_000_000)  # rolls also apply retention, with the real clock
    first_segment_max = part.segments[0].max_timestamp
    assert part.segments[0].base_offset == 0
    assert part.enforce_retention(now_ms=first_segment_max + hour) == []
    deleted = part.enforce_retention(now_ms=first_segment_max + hour + 1)
    assert deleted == [0]
    assert not (tmp_path / "p0" / f"{0:020d}.log").exists()
    assert part.enforce_retention(now_ms=10**15)
    assert len(part.segments) == 1, "the active segment stays however old it is"


UNSYNCED = TopicConfig(segment_bytes=1024, index_interval_bytes=200, flush=FlushPolicy("never"))


def test_dropping_before_an_offset_removes_only_closed_segments_wholly_below_it(tmp_path: Path) -> None:
    part = make(tmp_path, UNSYNCED)
    written = fill(part, 30)
    bases = [s.base_offset for s in part.segments]
    assert len(bases) > 3
    assert part.drop_before(bases[2] - 1) == bases[:1]  # the second segment holds bases[2] - 1
    assert part.drop_before(bases[2]) == bases[1:2]
    assert part.drop_before(10**9) == bases[2:-1]  # never the active segment
    part.close()
    again = make(tmp_path, UNSYNCED)
    assert again.log_start_offset == bases[-1]
    assert [v for _, v in read_all(again)] == written[bases[-1] :]


def test_a_log_restarted_past_its_end_is_empty_there_and_takes_the_leaders_batches(tmp_path: Path) -> None:
    part = make(tmp_path, UNSYNCED)
    fill(part, 10)
    start = part.log_end_offset + 1000  # where a compacted leader's log starts
    part.restart_at(start)
    assert (part.log_start_offset, part.log_end_offset, part.high_watermark) == (start, start, start)
    batch = encode_batch([b"a", b"b"])
    copied = bytearray(batch)
    copied[:8] = start.to_bytes(8, "big")  # a leader's batch keeps its offset
    part.append_encoded(copied, assign_offsets=False)
    part.close()
    again = make(tmp_path, UNSYNCED)
    assert (again.log_start_offset, again.log_end_offset) == (start, start + 2)
    assert read_all(again) == [(start, b"a"), (start + 1, b"b")]
    with pytest.raises(ValueError):
        again.restart_at(start)


def test_committed_reads_stop_at_the_high_watermark(tmp_path: Path) -> None:
    part = Partition(tmp_path / "p0", "t", 0, SMALL, hw_follows_flush=False)
    fill(part, 5)
    assert part.high_watermark == 0
    assert part.read(0, isolation="committed").batches == []
    assert len(read_all(part, isolation="uncommitted")) == 20
    part.set_high_watermark(8)
    assert [o for o, _ in read_all(part, isolation="committed")] == list(range(8))
    part.set_high_watermark(10**9)
    assert part.high_watermark == part.log_end_offset


def test_append_encoded_checks_crc_and_stamps_offsets(tmp_path: Path) -> None:
    part = make(tmp_path)
    part.append_records([b"x"])
    produced = encode_batch([b"p1", b"p2"], base_offset=777)
    assert part.append_encoded(produced) == (1, 2)
    stored = part.read(1).batches[0]
    assert check_batch(stored).base_offset == 1
    assert [bytes(v) for v in decode_batch(stored).values()] == [b"p1", b"p2"]
    damaged = bytearray(produced)
    damaged[-1] ^= 0xFF
    with pytest.raises(InvalidBatchError, match="CRC"):
        part.append_encoded(damaged)
    assert part.log_end_offset == 3


def test_a_batch_checked_on_arrival_still_gets_its_framing_checked(tmp_path: Path) -> None:
    """`crc_checked=True` (a staged transaction batch, CRC-checked when staged) skips only the CRC."""
    part = make(tmp_path)
    staged = encode_batch([b"a", b"b"])
    assert part.append_encoded(staged, crc_checked=True) == (0, 1)
    torn = bytes(staged)[:-3]
    with pytest.raises(InvalidBatchError, match="length"):
        part.append_encoded(torn, crc_checked=True)
    assert [v for _, v in read_all(part)] == [b"a", b"b"] and part.log_end_offset == 2


def test_reads_are_zero_copy_views_and_sendfile_slices(tmp_path: Path) -> None:
    part = make(tmp_path)
    fill(part, 30)
    result = part.read(5, 1500)
    assert all(isinstance(v.obj, __import__("mmap").mmap) for v in result.batches)
    expected = b"".join(bytes(v) for v in result.batches)
    left, right = socket.socketpair()
    with left, right:
        for piece in result.slices:
            sent = 0
            while sent < piece.length:
                sent += os.sendfile(left.fileno(), piece.fileno, piece.position + sent, piece.length - sent)
        left.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := right.recv(65536):
            received += chunk
    assert received == expected


def test_clean_reopen_keeps_everything(tmp_path: Path) -> None:
    part = make(tmp_path)
    written = fill(part, 40)
    part.close()
    again = make(tmp_path)
    assert again.recovery.clean_shutdown and not again.recovery.repaired
    assert [v for _, v in read_all(again)] == written
    assert again.offset_for_timestamp(1_000 + 10 * 20) == 80
    again.append_records([b"more"])
    assert read_all(again, len(written)) == [(len(written), b"more")]


@pytest.mark.parametrize(
    ("policy", "syncs_each_append"),
    [
        (FlushPolicy.every_batch(), True),
        (FlushPolicy.never(), False),
        (FlushPolicy.every_bytes(10_000), False),
    ],
)
def test_flush_policies(tmp_path: Path, policy: FlushPolicy, syncs_each_append: bool) -> None:
    part = make(tmp_path, TopicConfig(flush=policy))
    for _ in range(5):
        part.append_records([b"x" * 100])
    assert (part.stats.fsyncs == 5) is syncs_each_append
    if policy.mode == "never":
        assert part.high_watermark == 5 and part.stats.fsyncs == 0
    if policy.mode == "bytes":
        assert part.high_watermark == 0, "unflushed data is not committed yet"
        part.append_records([b"x" * 10_000])
        assert part.stats.fsyncs == 1 and part.high_watermark == 6


def test_appends_without_waiting_share_the_next_flush(tmp_path: Path) -> None:
    part = make(tmp_path, TopicConfig(flush=FlushPolicy.every_batch()))
    for i in range(10):
        part.append_encoded(encode_batch([b"v%d" % i]), wait_durable=False)
    assert part.stats.fsyncs == 0 and part.high_watermark == 0, "nothing is committed before the flush"
    part.flush()
    assert part.stats.fsyncs == 1 and part.high_watermark == 10


def test_interval_policy_is_flushed_by_the_clock(tmp_path: Path) -> None:
    part = make(tmp_path, TopicConfig(flush=FlushPolicy.every_ms(20)))
    part.append_records([b"x"])
    assert part.high_watermark == 0
    time.sleep(0.03)
    part.flush_if_due()
    assert part.high_watermark == 1 and part.stats.fsyncs == 1


def test_truncate_to_cuts_across_segments_without_disturbing_readers(tmp_path: Path) -> None:
    part = make(tmp_path)
    written = fill(part, 60)
    held = part.read(150, 10_000)  # views over the bytes about to be removed
    held_bytes = [bytes(v) for v in held.batches]
    segments_before = len(part.segments)

    assert part.truncate_to(150) == 148, "a cut inside a batch removes the whole batch"
    assert part.log_end_offset == part.high_watermark == 148
    assert len(part.segments) < segments_before
    assert [bytes(v) for v in held.batches] == held_bytes, "old views still read the old bytes"
    assert [v for _, v in read_all(part)] == written[:148]
    assert part.offset_for_timestamp(10**12) is None

    assert part.append_records([b"new"]) == (148, 148)
    part.close()
    again = make(tmp_path)
    assert not again.recovery.repaired
    assert [v for _, v in read_all(again)] == [*written[:148], b"new"]


def test_waiting_for_the_fsync_of_records_a_truncation_cut_returns(tmp_path: Path) -> None:
    """An append that computed its end before a follower's truncation (another thread) cut
    its records: its wait for their fsync ends instead of fsyncing until the log regrows."""
    part = make(tmp_path, TopicConfig(flush=FlushPolicy(mode="never")))
    part.append_records([b"a"] * 4)
    _, last = part.append_records([b"b"] * 4)
    part.truncate_to(4)
    waiter = threading.Thread(target=part._wait_durable, args=(last + 1,), daemon=True)
    waiter.start()
    waiter.join(30)  # a guard against hanging the suite: it returns at once
    assert not waiter.is_alive(), "still waiting for records that are gone"
    assert part.log_end_offset == 4


def test_truncate_to_a_segment_boundary_reactivates_the_previous_segment(tmp_path: Path) -> None:
    part = make(tmp_path)
    written = fill(part, 40)
    boundary = part.segments[1].base_offset
    assert part.truncate_to(boundary) == boundary
    assert part.segments[-1].next_offset == boundary
    part.append_records([b"tail"])
    assert [v for _, v in read_all(part)] == [*written[:boundary], b"tail"]


def test_follower_appends_keep_the_leaders_offsets_and_epoch(tmp_path: Path) -> None:
    leader = make(tmp_path / "leader")
    leader.leader_epoch = 4
    leader.append_records([b"a", b"b"])
    leader.append_records([b"c"])
    follower = make(tmp_path / "follower")
    batches = [bytes(v) for v in leader.read(0).batches]
    assert follower.append_encoded(batches[0], assign_offsets=False) == (0, 1)
    with pytest.raises(InvalidBatchError, match="starts at offset 0, but the log ends at 2"):
        follower.append_encoded(batches[0], assign_offsets=False)
    follower.append_encoded(batches[1], assign_offsets=False)
    copied = [bytes(v) for v in follower.read(0).batches]
    assert copied == batches
    assert check_batch(copied[1]).leader_epoch == 4


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=40),
    data=st.data(),
)
@settings(max_examples=40, deadline=None)
def test_truncate_then_reopen_is_a_prefix(sizes: list[int], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        part = Partition(Path(tmp), "t", 0, TopicConfig(segment_bytes=1024, index_interval_bytes=100))
        written: list[bytes] = []
        starts = []
        for n in sizes:
            starts.append(len(written))
            values = [b"v%d" % (len(written) + i) * 10 for i in range(n)]
            part.append_records(values)
            written += values
        offset = data.draw(st.integers(min_value=0, max_value=len(written)))
        end = part.truncate_to(offset)
        expected_end = (
            max([s for s in starts if s <= offset] or [0]) if offset < len(written) else len(written)
        )
        assert end == expected_end
        if data.draw(st.booleans()):
            part.close()
        reopened = Partition(Path(tmp), "t", 0, TopicConfig(segment_bytes=1024, index_interval_bytes=100))
        assert [v for _, v in read_all(reopened)] == written[:end]


def _cached_pages(path: Path, length: int) -> list[bool]:
    """Which pages of the file's first `length` bytes are in the page cache (mincore(2))."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    pages = (length + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vector = ctypes.create_string_buffer(pages)
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            assert libc.mincore(address, length, vector) == 0, os.strerror(ctypes.get_errno())
        finally:
            libc.munmap(address, length)
    finally:
        os.close(fd)
    return [bool(b & 1) for b in vector.raw]


def test_durable_bytes_far_behind_the_tail_leave_the_page_cache_and_read_back_from_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log hands back the pages of fsynced bytes more than a window behind its end (so appends
    reuse them); the bytes within the window stay cached, and every record still reads back."""
    from contraflow import page_cache
    from contraflow.spu.storage import segment

    monkeypatch.setattr(segment, "TAIL_CACHE_BYTES", 2 << 20)
    part = make(tmp_path, TopicConfig())
    value = b"v" * 1000
    for _ in range(10):  # ten durable appends of 1,000 KB each: 10 MB
        part.append_records([value] * 1000)
    log_file = next((tmp_path / "p0").glob("*.log"))
    size = log_file.stat().st_size
    cached = _cached_pages(log_file, size)
    # released in steps of whole large folios: at most a step and a folio past the window stay
    kept = segment.TAIL_CACHE_BYTES + page_cache.STEP_BYTES + page_cache.HUGE_PAGE_BYTES
    behind = cached[: (size - kept) // 4096]
    within = cached[-(segment.TAIL_CACHE_BYTES // 4096) :]
    assert behind and not any(behind)
    assert all(within)
    values = [v for _, v in read_all(part)]
    assert len(values) == 10_000 and set(values) == {value}
    part.close()
