"""Idempotent producers: producer ids and per-partition sequence checks.

InitProducerId hands out ids that stay unique across restarts (they start from
the clock). For each (producer id, partition) the last few batches' sequence
numbers are remembered, so a retried batch is answered with the offsets it got
the first time instead of being appended twice, and a gap is refused with
OUT_OF_ORDER_SEQUENCE_NUMBER. Like Kafka, five in-flight batches are covered.
The sequence state lives in memory: after an SPU restart the first batch of a
producer on a partition is accepted whatever its sequence.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from contraflow.spu.kafka.errors import KafkaError, KafkaErrorCode

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
    def __init__(self) -> None:
        self._next = itertools.count(time.time_ns() // 1_000)

    def allocate(self) -> int:
        return next(self._next)


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

    def record(self, key: tuple[int, str, int], epoch: int, batch: SequencedBatch) -> None:
        with self._lock:
            state = self._states.get(key)
            if state is None or epoch > state.epoch:
                state = self._states[key] = _PartitionState(epoch)
            self._states.move_to_end(key)
            state.recent.append(batch)
            while len(self._states) > self._max_tracked:
                self._states.popitem(last=False)
