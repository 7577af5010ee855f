"""Idempotent produce: who wrote a batch and its sequence number, inside the batch.

A batch's header has one producer field (i64, covered by the CRC, -1 for none).
An idempotent producer puts its producer id (random, 32 bits) in the high bits
and the batch's sequence number for that partition (31 bits) in the low ones.
Because the pair travels inside the batch, followers copy it with the log and
any replica that becomes leader can rebuild the last sequence per producer
from its own log: a retry after a failover is recognised there too.
"""

from __future__ import annotations

import secrets

SEQUENCE_BITS = 31
SEQUENCE_MASK = (1 << SEQUENCE_BITS) - 1
NO_PRODUCER = -1


def new_producer_id() -> int:
    return secrets.randbits(32)


def producer_field(producer_id: int, sequence: int) -> int:
    """The header value for batch `sequence` of `producer_id`."""
    return (producer_id << SEQUENCE_BITS) | (sequence & SEQUENCE_MASK)


def split_producer_field(value: int) -> tuple[int, int] | None:
    """(producer id, sequence), or None for a batch written without idempotence."""
    if value < 0:
        return None
    return value >> SEQUENCE_BITS, value & SEQUENCE_MASK
