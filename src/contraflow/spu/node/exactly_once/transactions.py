"""Exactly-once batch commits: staging, atomic multi-partition commit, abort, timeout.

A writer (e.g. one Spark micro-batch) stages record batches under
`(producer_id, batch_id)` for any number of partitions, from any number of
connections. `commit` appends all of them under the partitions' write gates,
journalled in the `BatchLedger` (intent, appends, commit), and only then moves
the high watermarks, so a committed-isolation reader sees all of a batch or
none of it. Committing a batch id that the ledger already holds discards what
was staged and returns the recorded end offsets: replayed batches never
duplicate output. Staging lives in memory up to `memory_limit` bytes SPU-wide and in
its transaction's spill file past it (`spill.py`); a restart or timeout loses it, which
the writer sees as UNKNOWN_TRANSACTION when it says how many batches it staged.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from contraflow.spu.node.exactly_once.journal import BatchLedger, Offsets
from contraflow.spu.node.exactly_once.spill import SpilledBatch, SpillFile
from contraflow.spu.protocol import messages as m
from contraflow.spu.protocol.errors import ErrorCode, SpuError
from contraflow.spu.protocol.topics import TopicPartition

TxnKey = tuple[str, int]


class AppendTarget(Protocol):
    """What a commit needs from the partitions (the server's `Partitions` provides it).

    `fence` hides everything from an offset on from committed readers until
    `publish`; a commit that fails midway leaves its fence up (see Partitions)."""

    def locked(self, tps: Iterable[TopicPartition]) -> AbstractContextManager[None]: ...
    def log_end(self, tp: TopicPartition) -> int: ...
    def fence(self, tp: TopicPartition, offset: int) -> None: ...
    def append_unsynced(self, tp: TopicPartition, batch: bytes | memoryview) -> tuple[int, int]: ...
    def sync(self, tp: TopicPartition) -> None: ...
    def publish(self, tp: TopicPartition) -> None: ...


@dataclass
class _Staged:
    """One staged record batch (in memory, or spilled) and the connection it counts against."""

    tp: TopicPartition
    data: bytes | memoryview | SpilledBatch
    owner: Hashable
    sequence: int | None = None  # the stage request's number, if the writer numbers them

    @property
    def in_memory(self) -> bool:
        return not isinstance(self.data, SpilledBatch)

    def payload(self) -> bytes | memoryview:
        """The batch's bytes (read back from the spill file if it was spilled)."""
        return self.data.read() if isinstance(self.data, SpilledBatch) else self.data


@dataclass
class _WriterStage:
    """One writer attempt's staging. Numbered stage requests may arrive in any order (a
    retry on a new connection overtakes the requests that followed it, another SPU's
    copies): a number seen before is a resend, and the batches commit in number order."""

    attempt: int
    batches: list[_Staged] = field(default_factory=list)
    seen: dict[TopicPartition, set[int]] = field(default_factory=dict)

    def in_order(self) -> list[_Staged]:
        """The batches in the writer's order: by request number where every one has one
        (a stable sort keeps a request's batches together), else as they arrived."""
        if any(b.sequence is None for b in self.batches):
            return list(self.batches)
        return sorted(self.batches, key=lambda b: b.sequence or 0)


@dataclass
class _Pending:
    spill: SpillFile
    writers: dict[str, _WriterStage] = field(default_factory=dict)
    touched: float = 0.0

    def batches(self) -> list[_Staged]:
        return [b for w in self.writers.values() for b in w.in_order()]


@dataclass(frozen=True, slots=True)
class CommitResult:
    end_offsets: Offsets
    already_committed: bool


class TransactionCoordinator:
    """Thread-safe; `commit` does disk I/O and belongs in a worker thread."""

    def __init__(
        self,
        ledger: BatchLedger,
        target: AppendTarget,
        *,
        spill_dir: Path,
        timeout_s: float = 60.0,
        max_staged_bytes_per_owner: int = 64 * 1024 * 1024,
        memory_limit: int = 64 * 1024 * 1024,
    ) -> None:
        self._ledger = ledger
        self._target = target
        self._spill_dir = spill_dir
        self.timeout_s = timeout_s
        self._owner_limit = max_staged_bytes_per_owner
        self._memory_limit = memory_limit
        self._lock = threading.Lock()
        self._pending: dict[TxnKey, _Pending] = {}
        self._owner_bytes: dict[Hashable, int] = {}
        self._memory_bytes = 0  # staged bytes held in memory, every connection's
        self._producer_locks: dict[str, threading.Lock] = {}

    # -- recovery --------------------------------------------------------------------------------

    @staticmethod
    def recover(ledger: BatchLedger, truncate: Callable[[TopicPartition, int], object]) -> list[TxnKey]:
        """Before the partitions open: undo the appends of commits that crashed midway
        (truncate back to where they started), then journal the abort so it happens once."""
        undone = []
        for intent in ledger.dangling():
            for tp, start in sorted(intent.starts.items()):
                truncate(tp, start)
            ledger.record_abort(intent.producer_id, intent.batch_id)
            undone.append((intent.producer_id, intent.batch_id))
        return undone

    # -- staging ---------------------------------------------------------------------------------

    def stage(
        self,
        producer_id: str,
        batch_id: int,
        tp: TopicPartition,
        batches: Sequence[bytes | memoryview],
        *,
        writer: str = "",
        attempt: int = 0,
        sequence: int | None = None,
        owner: Hashable = None,
    ) -> bool:
        """Keep `batches` for a later commit. Returns False when the batch id is already committed
        (the data is dropped: a replay needs no staging)."""
        self._check_not_forgotten(producer_id, batch_id)
        if self._ledger.lookup(producer_id, batch_id) is not None:
            return False
        size = sum(len(b) for b in batches)
        with self._lock:
            if self._owner_bytes.get(owner, 0) + size > self._owner_limit:
                raise SpuError(
                    ErrorCode.TOO_MANY_REQUESTS,
                    f"staged bytes of this connection would exceed {self._owner_limit}",
                )
            pending = self._pending.get((producer_id, batch_id))
            if pending is None:
                pending = self._pending[(producer_id, batch_id)] = _Pending(SpillFile(self._spill_dir))
            stage = pending.writers.get(writer)
            if stage is None or stage.attempt != attempt:
                if stage is not None:  # a new attempt replaces what the old one staged
                    self._release(stage.batches)
                stage = pending.writers[writer] = _WriterStage(attempt)
            seen = stage.seen.setdefault(tp, set())
            if sequence in seen:
                return True  # a resend of what is staged already
            kept = self._keep(batches, size, pending.spill)
            if sequence is not None:
                seen.add(sequence)
            stage.batches.extend(_Staged(tp, b, owner, sequence) for b in kept)
            self._owner_bytes[owner] = self._owner_bytes.get(owner, 0) + size
            pending.touched = time.monotonic()
        return True

    def _keep(
        self, batches: Sequence[bytes | memoryview], size: int, spill: SpillFile
    ) -> Sequence[bytes | memoryview | SpilledBatch]:
        """The batches themselves while staging in memory stays within its limit, else their
        places in the spill file; all or nothing (a failed spill keeps none). Lock held."""
        if self._memory_bytes + size <= self._memory_limit:
            self._memory_bytes += size
            return batches
        return [spill.write(b) for b in batches]

    def _release(self, batches: list[_Staged]) -> None:
        for b in batches:
            if b.in_memory:
                self._memory_bytes -= len(b.data)
            left = self._owner_bytes.get(b.owner, 0) - len(b.data)
            if left > 0:
                self._owner_bytes[b.owner] = left
            else:
                self._owner_bytes.pop(b.owner, None)

    def _take(self, key: TxnKey) -> _Pending | None:
        """Remove a transaction's staging; the caller closes its spill file when done with it."""
        with self._lock:
            pending = self._pending.pop(key, None)
            if pending is not None:
                self._release(pending.batches())
            return pending

    def _drop(self, key: TxnKey) -> bool:
        """Discard a transaction's staging; True if there was any."""
        pending = self._take(key)
        if pending is None:
            return False
        pending.spill.close()
        return True

    def pending_batches(self) -> list[TxnKey]:
        """The (producer, batch) pairs with staging kept."""
        with self._lock:
            return list(self._pending)

    def take_partition(self, producer_id: str, batch_id: int, tp: TopicPartition) -> list[bytes | memoryview]:
        """Remove and return what was staged for one partition of the batch, in staging
        order per writer (a cluster commits each partition on its own)."""
        with self._lock:
            pending = self._pending.get((producer_id, batch_id))
            if pending is None:
                return []
            taken: list[_Staged] = []
            for stage in pending.writers.values():
                taken.extend(b for b in stage.in_order() if b.tp == tp)
                stage.batches = [b for b in stage.batches if b.tp != tp]
            self._release(taken)
            payloads = [b.payload() for b in taken]
            if not pending.batches():  # every partition taken: the batch's staging is over
                del self._pending[(producer_id, batch_id)]
                pending.spill.close()
            return payloads

    def stage_request(
        self, req: m.TxnStageRequest, batches: Sequence[bytes | memoryview], *, owner: Hashable
    ) -> bool:
        """`stage` as a stage request asks: its transaction, partition, writer, attempt and number."""
        return self.stage(
            req.producer_id,
            req.batch_id,
            (req.topic, req.partition),
            batches,
            writer=req.writer,
            attempt=req.attempt,
            sequence=req.sequence,
            owner=owner,
        )

    def staged_bytes(self, owner: Hashable) -> int:
        with self._lock:
            return self._owner_bytes.get(owner, 0)

    def spills(self, size: int) -> bool:
        """Whether staging `size` more bytes now would go to disk (a hint: it is not reserved)."""
        return self._memory_bytes + size > self._memory_limit

    def memory_bytes(self) -> int:
        """Staged bytes held in memory now (at most `memory_limit`; the rest is spilled)."""
        with self._lock:
            return self._memory_bytes

    # -- completion ------------------------------------------------------------------------------

    def commit(self, producer_id: str, batch_id: int, expected_batches: int | None = None) -> CommitResult:
        """Make every staged batch visible atomically; idempotent per (producer_id, batch_id)."""
        self._check_not_forgotten(producer_id, batch_id)
        with self._producer_lock(producer_id):
            recorded = self._ledger.lookup(producer_id, batch_id)
            if recorded is not None:
                self._drop((producer_id, batch_id))
                return CommitResult(recorded, already_committed=True)
            pending = self._take((producer_id, batch_id)) or _Pending(SpillFile(self._spill_dir))
            try:
                staged = pending.batches()
                if expected_batches is not None and expected_batches != len(staged):
                    raise SpuError(
                        ErrorCode.UNKNOWN_TRANSACTION,
                        f"batch {batch_id} of producer {producer_id!r}: {len(staged)} record batches "
                        f"staged, {expected_batches} expected (staging lost to a restart or timeout); "
                        "replay the batch",
                    )
                ends = self._append_atomically(producer_id, batch_id, staged)
            finally:
                pending.spill.close()
            return CommitResult(ends, already_committed=False)

    def _append_atomically(self, producer_id: str, batch_id: int, staged: list[_Staged]) -> Offsets:
        tps = sorted({b.tp for b in staged})
        with self._target.locked(tps):
            starts = {tp: self._target.log_end(tp) for tp in tps}
            for tp, start in starts.items():
                self._target.fence(tp, start)
            self._ledger.record_intent(producer_id, batch_id, starts)
            for b in staged:
                self._target.append_unsynced(b.tp, b.payload())
            for tp in tps:
                self._target.sync(tp)
            ends = {tp: self._target.log_end(tp) for tp in tps}
            self._ledger.record_commit(producer_id, batch_id, ends)
            for tp in tps:
                self._target.publish(tp)
        return ends

    def abort(self, producer_id: str, batch_id: int) -> bool:
        """Discard what was staged; True if there was anything."""
        return self._drop((producer_id, batch_id))

    def expire(self, now: float | None = None) -> list[TxnKey]:
        """Drop staging untouched for longer than the timeout (a writer that died)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            stale = [k for k, p in self._pending.items() if now - p.touched > self.timeout_s]
        return [k for k in stale if self._drop(k)]

    def ledger(self, producer_id: str, batch_id: int) -> Offsets | None:
        self._check_not_forgotten(producer_id, batch_id)
        return self._ledger.lookup(producer_id, batch_id)

    def _check_not_forgotten(self, producer_id: str, batch_id: int) -> None:
        if self._ledger.is_forgotten(producer_id, batch_id):
            raise SpuError(
                ErrorCode.STALE_TRANSACTION,
                f"batch {batch_id} of producer {producer_id!r} is older than the ledger remembers",
            )

    def _producer_lock(self, producer_id: str) -> threading.Lock:
        with self._lock:
            return self._producer_locks.setdefault(producer_id, threading.Lock())

    def release_owner(self, owner: Hashable) -> None:
        """A connection closed: its staged data stays (another may commit) but stops counting."""
        with self._lock:
            self._owner_bytes.pop(owner, None)
