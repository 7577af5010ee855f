"""Reading a replica's whole log back, header by header.

What a new leader knows of idempotent producers and of committed batches is
derived from the log it holds (`idempotence/producers.py`, `exactly_once/log_ledger.py`); both are rebuilt
from one pass over the batch headers when a replica starts leading or
following, and after a truncation.
"""

from __future__ import annotations

from collections.abc import Iterator

from contraflow.spu.protocol.batch import BatchHeader
from contraflow.spu.storage.partition import Partition

READ_BYTES = 4 << 20


def batch_headers(part: Partition) -> Iterator[BatchHeader]:
    """Every batch header of the partition, oldest first (uncommitted tail included)."""
    offset = part.log_start_offset
    while True:
        result = part.read(offset, READ_BYTES, isolation="uncommitted")
        if not result.batches:
            return
        for view in result.batches:
            yield BatchHeader.parse(view)
        offset = result.next_offset
