"""The batch ledger of a cluster replica, derived from the commit marks in its log.

A lone SPU journals its commits in a file (`exactly_once/journal.py`); a replica of a
cluster reads the same facts out of its log instead, because the marks
(`protocol/commit_marks.py`) are copied with the records: which (query, batch)
committed to a partition, and where that commit starts and ends. So a new
leader knows every commit its log holds, and recognises a commit that a client
replays after a failover. Commits are per partition: a batch that writes to
several partitions commits each of them on its own, once.

A run of marked batches at the end of the log without the commit's last batch
is an *unfinished* commit (its leader died while appending): the replica that
starts leading cuts it off before it writes anything (`unfinished_start`).

Thread-safe: worker threads append and copy, the event loop looks up.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.protocol.batch import BatchHeader
from contraflow.spu.protocol.commit_marks import mark_of, query_hash
from contraflow.spu.protocol.topics import TopicPartition

CommitKey = tuple[int, int]  # (query hash, batch id)
RETAIN_PER_PARTITION = 10_000


@dataclass(frozen=True, slots=True)
class CommitRange:
    start: int  # first offset the commit wrote to the partition
    end: int  # offset after its last record


@dataclass(slots=True)
class _Open:
    key: CommitKey
    start: int


class _PartitionCommits:
    def __init__(self) -> None:
        self.done: OrderedDict[CommitKey, CommitRange] = OrderedDict()
        self.open: _Open | None = None
        self.floor: dict[int, int] = {}  # query hash -> lowest batch id still remembered


class ReplicatedLedger:
    def __init__(self, retain_per_partition: int = RETAIN_PER_PARTITION) -> None:
        self._retain = retain_per_partition
        self._lock = threading.Lock()
        self._partitions: dict[TopicPartition, _PartitionCommits] = {}

    def _of(self, tp: TopicPartition) -> _PartitionCommits:
        found = self._partitions.get(tp)
        if found is None:
            found = self._partitions[tp] = _PartitionCommits()
        return found

    # -- what the log holds ----------------------------------------------------------------------

    def observe(self, tp: TopicPartition, header: BatchHeader) -> CommitKey | None:
        """A batch now in the log (appended, copied or read back), in log order; the
        commit it completes, if it is a commit's last batch."""
        mark = mark_of(header)
        if mark is None:
            return None
        key = (mark.query, mark.batch_id)
        with self._lock:
            commits = self._of(tp)
            if commits.open is None or commits.open.key != key:
                commits.open = _Open(key, header.base_offset)
            if mark.last:
                commits.done[key] = CommitRange(commits.open.start, header.next_offset)
                commits.done.move_to_end(key)
                commits.open = None
                self._evict(commits)
                return key
        return None

    def _evict(self, commits: _PartitionCommits) -> None:
        while len(commits.done) > self._retain:
            (query, batch_id), _ = commits.done.popitem(last=False)
            commits.floor[query] = max(commits.floor.get(query, 0), batch_id + 1)

    def forget(self, tp: TopicPartition) -> None:
        """Before the partition is read back from its log (truncated, or first led/followed)."""
        with self._lock:
            self._partitions.pop(tp, None)

    # -- questions -------------------------------------------------------------------------------

    def committed(self, tp: TopicPartition, query_id: str, batch_id: int) -> CommitRange | None:
        """Where commit (query_id, batch_id) sits in the partition's log, None if it is not
        there; STALE_TRANSACTION for a batch id older than the partition remembers."""
        query = query_hash(query_id)
        with self._lock:
            commits = self._partitions.get(tp)
            if commits is None:
                return None
            if batch_id < commits.floor.get(query, 0):
                raise SpuError(
                    ErrorCode.STALE_TRANSACTION,
                    f"batch {batch_id} of {query_id!r} is older than {tp[0]}/{tp[1]} remembers",
                )
            return commits.done.get((query, batch_id))

    def unfinished_start(self, tp: TopicPartition) -> int | None:
        """Where an unfinished commit at the end of the log starts (None: there is none)."""
        with self._lock:
            commits = self._partitions.get(tp)
            return None if commits is None or commits.open is None else commits.open.start

    def ranges_after(self, tp: TopicPartition, offset: int) -> list[CommitRange]:
        """The commits that end past `offset` (not yet below the high watermark), oldest first."""
        with self._lock:
            commits = self._partitions.get(tp)
            if commits is None:
                return []
            return sorted((r for r in commits.done.values() if r.end > offset), key=lambda r: r.start)

    def ends(
        self, query_id: str, batch_id: int, tps: Iterable[TopicPartition], below: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """The end offset of commit (query_id, batch_id) in each of `tps` that holds it
        and where it is committed (its end at or below `below[tp]`, the high watermark)."""
        found: dict[TopicPartition, int] = {}
        for tp in tps:
            committed = self.committed(tp, query_id, batch_id)
            if committed is not None and committed.end <= below.get(tp, -1):
                found[tp] = committed.end
        return found
