"""What a read asks for and gets back, the same from an SPU or a log in this process.

`OffsetSpec` names where to start; `FetchResult` is what a fetch returns. Every
log client (`spu.api.LogClient`, the SPU clients) and their callers share them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from contraflow.spu.protocol.batch import DecodedBatch

OffsetSpec = Literal["earliest", "latest"] | int
"""`list_offsets` target: the log start, the end (high watermark when committed), or a timestamp in ms."""

DEFAULT_FETCH_BYTES = 1 << 20


@dataclass(frozen=True)
class FetchResult:
    """Whole batches from a fetch.

    The first batch may start before the requested offset (batches are never
    split); skip records below it, e.g. with `batch.records(start_offset=...)`.
    `next_offset` is where the next fetch should start.
    """

    batches: list[DecodedBatch]
    next_offset: int
    high_watermark: int
    log_start_offset: int
