"""The one table of idempotent producers: the last batches each wrote, per partition.

Both protocols' producers number their batches, and the numbers travel inside
each batch's header (`protocol/idempotence.py`: an SPU producer's id and batch
sequence, or a Kafka producer's id and base record sequence). A produce whose
batch repeats one of its producer's last batches is a retry: it is answered
with the offsets recorded the first time and not appended again; a gap in the
sequence is refused (`OutOfOrderSequence`), and so is an older producer epoch
(`StaleProducerEpoch`, Kafka's). Each door turns those into its own error codes.

The table is rebuilt from a replica's own log when it starts to lead or follow,
or after a truncation (`observe` over `log_scan`), and kept up to date from
every batch a follower copies, so a retry after a failover is still recognised.
A lone SPU keeps it in memory only. Producers come and go (each Kafka session
gets a new id), so at most `max_tracked` (producer, partition) pairs are kept:
a forgotten producer's next batch is accepted like its first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field

from contraflow.spu.protocol.batch import BatchHeader
from contraflow.spu.protocol.commit_marks import TRANSACTIONAL
from contraflow.spu.protocol.idempotence import SEQUENCE_WRAP, numbered_batch
from contraflow.spu.protocol.topics import TopicPartition

MAX_TRACKED = 100_000


class OutOfOrderSequence(Exception):
    """A batch skips sequence numbers, or repeats one older than the table remembers."""

    def __init__(self, producer: Hashable, tp: TopicPartition, first: int, expected: int) -> None:
        super().__init__(f"sequence {first} of producer {producer} on {tp[0]}/{tp[1]}, expected {expected}")
        self.expected = expected


class StaleProducerEpoch(Exception):
    """A batch of a producer epoch older than one already seen."""


@dataclass(frozen=True, slots=True)
class SequencedBatch:
    """One batch as its producer numbered it, and where it landed."""

    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class _Producer:
    epoch: int
    recent: deque[SequencedBatch] = field(default_factory=deque)


class ProducerTable:
    """Thread-safe; a produce holds `lock(tp)` across its check, append and record."""

    def __init__(self, max_tracked: int = MAX_TRACKED) -> None:
        self._states: OrderedDict[tuple[TopicPartition, Hashable], _Producer] = OrderedDict()
        self._max_tracked = max_tracked
        self._locks: dict[TopicPartition, threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, tp: TopicPartition) -> threading.Lock:
        """Held across check, append and record of an idempotent batch (worker threads)."""
        with self._guard:
            found = self._locks.get(tp)
            if found is None:
                found = self._locks[tp] = threading.Lock()
            return found

    def duplicate(
        self, tp: TopicPartition, producer: Hashable, epoch: int, first: int, last: int
    ) -> tuple[int, int] | None:
        """The offsets a retried batch got before; None for the producer's next batch (or its
        first, or one of a newer epoch); raises for a gap or a stale epoch."""
        with self._guard:
            state = self._states.get((tp, producer))
            if state is None or epoch > state.epoch:
                return None
            if epoch < state.epoch:
                raise StaleProducerEpoch(f"producer epoch {epoch} is older than {state.epoch}")
            for seen in state.recent:
                if (seen.first_sequence, seen.last_sequence) == (first, last):
                    return seen.base_offset, seen.last_offset
            expected = (state.recent[-1].last_sequence + 1) % SEQUENCE_WRAP if state.recent else first
            if first != expected:
                raise OutOfOrderSequence(producer, tp, first, expected)
            return None

    def record(
        self, tp: TopicPartition, producer: Hashable, epoch: int, batch: SequencedBatch, window: int
    ) -> None:
        """Remember a batch just appended (or read from the log): the last `window` count."""
        with self._guard:
            key = (tp, producer)
            state = self._states.get(key)
            if state is None or epoch > state.epoch:
                state = self._states[key] = _Producer(epoch)
            self._states.move_to_end(key)
            state.recent.append(batch)
            while len(state.recent) > window:
                state.recent.popleft()
            while len(self._states) > self._max_tracked:
                self._states.popitem(last=False)

    def observe(self, tp: TopicPartition, header: BatchHeader) -> None:
        """A batch in the log (copied, or read back): remember it if a producer numbered it.
        Batches of an exactly-once commit carry a commit mark in the same header field."""
        if header.attributes & TRANSACTIONAL:
            return
        numbered = numbered_batch(header.producer_id, header.record_count)
        if numbered is not None:
            producer, first, last, window = numbered
            batch = SequencedBatch(first, last, header.base_offset, header.last_offset)
            self.record(tp, producer, 0, batch, window)  # every id handed out here has epoch 0

    def forget(self, tp: TopicPartition) -> None:
        """Before `tp` is read back from its log. Caller holds `lock(tp)`."""
        with self._guard:
            for key in [k for k in self._states if k[0] == tp]:
                del self._states[key]
