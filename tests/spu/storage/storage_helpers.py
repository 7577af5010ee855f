"""Shared helpers for the storage tests (a plain module, not a conftest, to stay out of
the SPU server tests' way)."""

from __future__ import annotations

import shutil
from pathlib import Path

from contraflow.spu.protocol.batch import decode_batch
from contraflow.spu.storage.partition import Partition


def read_all(part: Partition, start: int = 0, isolation: str = "uncommitted") -> list[tuple[int, bytes]]:
    """Every (offset, value) from `start` to the end, through the normal read path."""
    records, error = read_until_error(part, start, isolation)
    if error is not None:
        raise error
    return records


def read_until_error(
    part: Partition, start: int = 0, isolation: str = "uncommitted"
) -> tuple[list[tuple[int, bytes]], Exception | None]:
    """Like `read_all`, but a read error ends the reading: (what came before it, the error)."""
    out: list[tuple[int, bytes]] = []
    offset = start
    while True:
        try:
            result = part.read(offset, 4096, isolation=isolation)  # type: ignore[arg-type]
        except Exception as err:  # the caller asserts on it
            return out, err
        if not result.batches:
            return out, None
        for view in result.batches:
            batch = decode_batch(view)
            out += [
                (o, bytes(v)) for o, v in zip(batch.offsets(), batch.values(), strict=True) if o >= offset
            ]
        offset = result.next_offset


def snapshot(src: Path, dst: Path) -> Path:
    """Copy a data directory as it is on disk right now: what a crash would leave."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst
