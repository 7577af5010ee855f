"""Idempotent producers: producer ids and per-partition sequence checks.

InitProducerId hands out random 32-bit ids (unique across restarts and across
the SPUs of a cluster with high probability). For each (producer id,
partition) the last few batches' sequence numbers are remembered, so a retried
batch is answered with the offsets it got the first time instead of being
appended twice, and a gap is refused with OUT_OF_ORDER_SEQUENCE_NUMBER. Like
Kafka, five in-flight batches are covered.

Each log batch also carries its Kafka producer id and base sequence (in the
log's producer field, as a negative number: the cluster's own idempotence
table, `node/idempotence/producers.py`, counts batches and leaves negative fields
alone). Followers copy it with the batch, so an SPU that starts leading a
partition rebuilds the sequences from its own log (`rebuild`) and a producer's
retry after a failover is still recognised. A lone SPU keeps the sequences in
memory only: after its restart the first batch of a producer on a partition is
accepted whatever its sequence.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from contraflow.spu.kafka.errors import KafkaError, KafkaErrorCode
from contraflow.spu.protocol.batch import BatchHeader
from contraflow.spu.protocol.idempotence import NO_PRODUCER, SEQUENCE_BITS, SEQUENCE_MASK

REMEMBERED_BATCHES = 5
MAX_TRACKED = 100_000  # (producer, partition) pairs; the least recently used are forgotten
_SEQUENCE_WRAP = 1 << 31


@dataclass(frozen=True, slots=True)
class SequencedBatch:
    base_sequence: int
    record_count: int
    base_offset: int

    @property
    def last_sequence(self) -> int:
        return (self.base_sequence + self.record_count - 1) % _SEQUENCE_WRAP


@dataclass(slots=True)
class _PartitionState:
    epoch: int
    recent: deque[SequencedBatch] = field(default_factory=lambda: deque(maxlen=REMEMBERED_BATCHES))


class ProducerIds:
    def allocate(self) -> int:
        return secrets.randbits(32) or 1  # never 0: see log_producer_field


def log_producer_field(producer_id: int, base_sequence: int) -> int:
    """A Kafka batch's producer id and base sequence as the log batch's producer field:
    the bitwise inverse of (id << 31 | sequence), so always below -1 (-1: no producer)."""
    if not 0 < producer_id < 1 << 32 or base_sequence < 0:
        return NO_PRODUCER  # not an id handed out here (or not idempotent): nothing to keep
    return ~((producer_id << SEQUENCE_BITS) | (base_sequence & SEQUENCE_MASK))


def kafka_producer_of(field: int) -> tuple[int, int] | None:
    """(producer id, base sequence) from a log producer field written by `log_producer_field`."""
    if field >= NO_PRODUCER:
        return None
    packed = ~field
    return packed >> SEQUENCE_BITS, packed & SEQUENCE_MASK


class SequenceTracker:
    """Sequence numbers per (producer id, topic, partition); thread-safe. Producers come and
    go (each session gets a new id), so at most `max_tracked` pairs are kept: a forgotten
    producer's next batch is accepted like the first one after a restart."""

    def __init__(self, max_tracked: int = MAX_TRACKED) -> None:
        self._states: OrderedDict[tuple[int, str, int], _PartitionState] = OrderedDict()
        self._max_tracked = max_tracked
        self._lock = threading.Lock()

    def duplicate_of(
        self, key: tuple[int, str, int], epoch: int, base_sequence: int, count: int
    ) -> int | None:
        """The base offset a retried batch got before, None for the next batch in order;
        raises for a stale epoch or a gap."""
        with self._lock:
            state = self._states.get(key)
            if state is None or epoch > state.epoch:
                return None
            if epoch < state.epoch:
                raise KafkaError(
                    KafkaErrorCode.INVALID_PRODUCER_EPOCH,
                    f"producer epoch {epoch} is older than {state.epoch}",
                )
            for seen in state.recent:
                if seen.base_sequence == base_sequence and seen.record_count == count:
                    return seen.base_offset
            expected = (
                (state.recent[-1].last_sequence + 1) % _SEQUENCE_WRAP if state.recent else base_sequence
            )
            if base_sequence != expected:
                raise KafkaError(
                    KafkaErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"sequence {base_sequence} of producer {key[0]} on {key[1]}/{key[2]}, expected {expected}",
                )
            return None

    def rebuild(self, tp: tuple[str, int], headers: Iterable[BatchHeader]) -> None:
        """Forget what was known of `tp` and learn its producers' batches from its log."""
        with self._lock:
            for key in [k for k in self._states if k[1:] == tp]:
                del self._states[key]
        for header in headers:
            found = kafka_producer_of(header.producer_id)
            if found is not None:
                producer, sequence = found
                batch = SequencedBatch(sequence, header.record_count, header.base_offset)
                self.record((producer, *tp), 0, batch)  # every id handed out here has epoch 0

    def record(self, key: tuple[int, str, int], epoch: int, batch: SequencedBatch) -> None:
        with self._lock:
            state = self._states.get(key)
            if state is None or epoch > state.epoch:
                state = self._states[key] = _PartitionState(epoch)
            self._states.move_to_end(key)
            state.recent.append(batch)
            while len(self._states) > self._max_tracked:
                self._states.popitem(last=False)
