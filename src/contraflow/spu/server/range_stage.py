"""`TXN_STAGE_RANGE`: the SPU stages a range of one of its own partitions into a transaction.

A routing-only query's sink task names the range its row refers to instead of
fetching it and sending the bytes back (`protocol.range_stage`). What gets
staged is what the task would have staged: each record's value and headers,
no key, stamped with the time of staging, no producer field, offsets left for
the log to assign at commit. A log batch wholly inside the range,
uncompressed, keyless and not small is copied as it is but for its header;
the rest (a batch the range cuts through, keys, compression, runs of small
batches) have their value and header columns sliced and joined into new
batches, column by column (numpy on the offsets: no step per record).

The copy is taken at staging time, from committed records, so what commits
is fixed when the writer hears back; the staged bytes count against the
asking connection like any stage request. A lone SPU only: in a cluster the
source range and the destination partition may have different leaders, and
staging must be copied to the in-sync followers (`cluster.commits`); there
the request is refused with UNSUPPORTED_API and the writer stages the bytes
itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from contraflow.spu.node.exactly_once.transactions import TransactionCoordinator
from contraflow.spu.node.partitions import Partitions
from contraflow.spu.protocol.batch import (
    HAS_HEADERS,
    NO_HEADERS,
    DecodedBatch,
    encode_columns,
)
from contraflow.spu.protocol.errors import ErrorCode, SpuError
from contraflow.spu.protocol.messages import TxnStageRangeRequest
from contraflow.spu.protocol.range_stage import record_count, restamped, routed_runs
from contraflow.spu.rpc.server import Connection, Reply

READ_BYTES = 8 << 20  # one read of the source partition


@dataclass(frozen=True)
class _Columns:
    """A batch's records [lo, hi) as value and header columns (offsets from 0, data)."""

    count: int
    values: tuple[np.ndarray, memoryview]
    headers: tuple[np.ndarray, memoryview] | None


class RangeStager:
    """Serves TXN_STAGE_RANGE for the public port's dispatcher (`handlers`)."""

    def __init__(
        self, partitions: Partitions, transactions: TransactionCoordinator, executor: Executor
    ) -> None:
        self._partitions = partitions
        self._txns = transactions
        self._executor = executor

    async def handle(
        self, conn: Connection, req: TxnStageRangeRequest, payload: memoryview, cid: int
    ) -> Reply:
        dest, source = (req.topic, req.partition), (req.source_topic, req.source_partition)
        self._partitions.check_exists(dest)
        self._partitions.check_exists(source)
        if req.end < req.start:
            raise SpuError(ErrorCode.INVALID_ARGUMENT, f"range [{req.start}, {req.end}) is reversed")
        batches = self._read(source, req.start, req.end)
        now_ms = time.time_ns() // 1_000_000
        loop = asyncio.get_running_loop()
        copied = await loop.run_in_executor(
            self._executor,
            lambda: [memoryview(b) for b in staged_copies(batches, req.start, req.end, now_ms)],
        )
        if not copied:  # retention removed the whole range
            return Reply({"staged": False, "batches": 0, "bytes": 0, "records": 0})
        accepted = self._txns.stage_request(req, copied, owner=conn.id)
        records = sum(record_count(b) for b in copied)
        size = sum(len(b) for b in copied)
        return Reply({"staged": accepted, "batches": len(copied), "bytes": size, "records": records})

    def _read(self, tp: tuple[str, int], start: int, end: int) -> list[DecodedBatch]:
        """The committed batches holding offsets [start, end) (those retention removed are gone)."""
        batches: list[DecodedBatch] = []
        offset = self._partitions.start_offset(tp, start)
        while offset < end:
            view = self._partitions.read(tp, offset, READ_BYTES, "committed", views=True)
            found = [DecodedBatch(part) for part in view.parts if isinstance(part, memoryview)]
            if not found:
                raise SpuError(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"{tp[0]}/{tp[1]}: offsets {offset}..{end} are not committed",
                )
            batches.extend(found)
            offset = max(offset + 1, view.next_offset)
        return batches


def staged_copies(batches: Iterable[DecodedBatch], start: int, end: int, now_ms: int) -> Iterator[bytearray]:
    """The log batches to stage for the records of `batches` in [start, end), in offset order."""
    for run in routed_runs(batches, start, end):
        if isinstance(run, DecodedBatch):
            yield bytearray().join(restamped(run.buffer, now_ms))
        else:
            yield _joined([columns for b in run if (columns := _sliced(b, start, end)) is not None])


def _sliced(batch: DecodedBatch, start: int, end: int) -> _Columns | None:
    lo = max(0, start - batch.base_offset)
    hi = min(batch.record_count, end - batch.base_offset)
    if lo >= hi:
        return None
    headers = batch.header_buffers() if batch.header.attributes & HAS_HEADERS else None
    return _Columns(
        hi - lo, _slice(batch.value_buffers(), lo, hi), None if headers is None else _slice(headers, lo, hi)
    )


def _slice(column: tuple[memoryview, memoryview], lo: int, hi: int) -> tuple[np.ndarray, memoryview]:
    """Records [lo, hi) of a binary column: offsets rebased to 0, the data they cover."""
    offsets = np.frombuffer(column[0], dtype="<i4")[lo : hi + 1].astype(np.int64)
    first = int(offsets[0])
    return offsets - first, column[1][first : int(offsets[-1])]


def _joined(pieces: list[_Columns]) -> bytearray:
    """One log batch of the pieces' records, in order (headers kept if any piece has them)."""
    count = sum(p.count for p in pieces)
    values = _concatenated([p.values for p in pieces])
    headers = None
    if any(p.headers is not None for p in pieces):
        headers = _concatenated([p.headers or _no_headers(p.count) for p in pieces])
    return encode_columns(count, values, headers=headers)


def _no_headers(count: int) -> tuple[np.ndarray, memoryview]:
    size = len(NO_HEADERS)
    return np.arange(count + 1, dtype=np.int64) * size, memoryview(NO_HEADERS * count)


def _concatenated(columns: list[tuple[np.ndarray, memoryview]]) -> tuple[bytes, bytes]:
    """Binary columns end to end, as int32 little-endian offsets and data."""
    shifts = np.cumsum([0] + [len(data) for _, data in columns[:-1]])
    offsets = np.concatenate(
        [np.zeros(1, np.int64)] + [o[1:] + s for (o, _), s in zip(columns, shifts, strict=True)]
    )
    return offsets.astype("<i4").tobytes(), b"".join(data for _, data in columns)
