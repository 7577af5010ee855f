"""Idempotent produce: who wrote a batch and its sequence numbers, inside the batch.

A batch's header has one producer field (i64, covered by the CRC, -1 for none).
An idempotent producer puts its producer id (random, 32 bits) in the high bits
and the batch's sequence number for that partition (31 bits) in the low ones.
Because the pair travels inside the batch, followers copy it with the log and
any replica that becomes leader can rebuild the last sequence per producer
from its own log: a retry after a failover is recognised there too.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

SEQUENCE_BITS = 31
SEQUENCE_MASK = (1 << SEQUENCE_BITS) - 1
SEQUENCE_WRAP = 1 << SEQUENCE_BITS
NO_PRODUCER = -1
SPU_WINDOW = 1  # an SPU producer's retry repeats its last batch
KAFKA_WINDOW = 5  # a Kafka producer has up to five batches in flight, as Kafka allows


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


# A Kafka producer's id and base sequence travel in the same field, as a negative number
# (the bitwise inverse of (id << 31 | sequence), always below -1), so that the two kinds
# of producer never share a key in the producers' table.


def log_producer_field(producer_id: int, base_sequence: int) -> int:
    """A Kafka batch's producer id and base sequence as the log batch's producer field."""
    if not 0 < producer_id < 1 << 32 or base_sequence < 0:
        return NO_PRODUCER  # not an id handed out here (or not idempotent): nothing to keep
    return ~((producer_id << SEQUENCE_BITS) | (base_sequence & SEQUENCE_MASK))


def kafka_producer_of(value: int) -> tuple[int, int] | None:
    """(producer id, base sequence) from a log producer field written by `log_producer_field`."""
    if value >= NO_PRODUCER:
        return None
    packed = ~value
    return packed >> SEQUENCE_BITS, packed & SEQUENCE_MASK


@dataclass(frozen=True, slots=True)
class ProducerKey:
    """A producer as the producers' table knows it: its protocol and its id."""

    protocol: str  # "spu" or "kafka"
    id: int

    def __str__(self) -> str:
        return str(self.id)


def numbered_batch(value: int, record_count: int) -> tuple[ProducerKey, int, int, int] | None:
    """(producer, first sequence, last sequence, batches remembered) of a batch whose header
    field is `value`; None for a batch no producer numbered. An SPU producer numbers batches,
    a Kafka producer records."""
    spu = split_producer_field(value)
    if spu is not None:
        return ProducerKey("spu", spu[0]), spu[1], spu[1], SPU_WINDOW
    kafka = kafka_producer_of(value)
    if kafka is not None:
        last = (kafka[1] + record_count - 1) % SEQUENCE_WRAP
        return ProducerKey("kafka", kafka[0]), kafka[1], last, KAFKA_WINDOW
    return None
