"""Spark's checkpoint directory: where contraflow keeps it, and reading what Spark writes into it.

One query's checkpoint holds `offsets/{batch}` (a version line, a JSON
metadata line with the session conf the query started with, then one offset
per source in plan order), written before the batch runs, and
`commits/{batch}`, written after it. Everything that reads those files goes
through here, so Spark's layout is spelled once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from contraflow.spark.offsets import to_partition_offsets

CHECKPOINTS = "checkpoints"  # the directory under a data dir (contraflow.spark.session sets it as Spark's)


def checkpoint_root(data_dir: str | os.PathLike[str]) -> Path:
    """The directory under `data_dir` that holds every query's checkpoint."""
    return Path(data_dir) / CHECKPOINTS


def checkpoint_path(data_dir: str | os.PathLike[str], flow: str, pipeline: str) -> Path:
    """Where the runtime keeps the checkpoint of pipeline `pipeline` of flow `flow`."""
    return checkpoint_root(data_dir) / flow / pipeline


def parse_offsets(raw: Any) -> dict[int, int]:
    """A source's Spark offset (`{"0": 12}` as JSON text or a dict) as partition -> offset."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    if not isinstance(raw, dict):
        return {}
    return to_partition_offsets(raw)


def newest_batch(checkpoint: str | os.PathLike[str], log: str) -> int | None:
    """The newest batch id in one of the checkpoint's logs (`{log}/{batch}`), None while empty."""
    directory = Path(checkpoint) / log
    batches = [int(p.name) for p in directory.iterdir() if p.name.isdigit()] if directory.is_dir() else []
    return max(batches, default=None)


def last_committed_batch(checkpoint: str | os.PathLike[str]) -> int | None:
    """The newest batch id in the checkpoint's commit log (`commits/{batch}`), None before the first."""
    return newest_batch(checkpoint, "commits")


def has_progress(checkpoint: str | os.PathLike[str]) -> bool:
    """True once the query at `checkpoint` committed a batch (its state then lives there)."""
    return last_committed_batch(checkpoint) is not None


def _offset_lines(checkpoint: str | os.PathLike[str], batch: int) -> list[str]:
    """The lines of `offsets/{batch}`, none if the file cannot be read."""
    try:
        return (Path(checkpoint) / "offsets" / str(batch)).read_text().splitlines()
    except OSError:
        return []


def state_partitions(checkpoint: str | os.PathLike[str]) -> int | None:
    """How many partitions the checkpoint's state is split into (Spark keeps the shuffle
    partitions a query started with for good), None before its first batch."""
    batch = newest_batch(checkpoint, "offsets")
    if batch is None:
        return None
    lines = _offset_lines(checkpoint, batch)
    conf = json.loads(lines[1]).get("conf", {}) if len(lines) > 1 else {}
    value = conf.get("spark.sql.shuffle.partitions")
    return int(value) if value is not None else None


def last_committed_ends(checkpoint: str | os.PathLike[str]) -> tuple[dict[int, int], ...]:
    """Each source's end offset in the newest batch the checkpoint's commit log holds (none: ()).

    Spark hands the sources those offsets to commit only when it plans the
    next batch, so after a stop they can be ahead of the consumer offsets on the SPU.
    """
    batch = last_committed_batch(checkpoint)
    if batch is None:
        return ()
    return tuple(parse_offsets(line) for line in _offset_lines(checkpoint, batch)[2:])
