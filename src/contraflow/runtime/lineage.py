"""Lineage of a pipeline's micro-batches: which input offsets each batch consumed and where its outputs end.

A batch's inputs come from the Spark listener (each source's end offset), its
outputs from the SPU batch ledger (the end offset of every topic the sink's
transaction `(query id, batch id)` wrote). The pipeline's *delivered frontier*
on an input topic is the input end of the newest batch such that it and every
earlier batch had all their outputs delivered downstream. Batches are settled
strictly in order, so a batch writing nothing never jumps ahead of an earlier
one whose outputs are still on their way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class BatchLineage:
    """What one batch read (input topic -> next offset) and wrote (output topic -> end offset)."""

    consumed: Mapping[str, int]
    produced: Mapping[str, int]


def ledger_ends(ends: Mapping[tuple[str, int], int] | None) -> dict[str, int]:
    """The ledger's (topic, partition) -> end offset per topic (None: the batch wrote nothing)."""
    produced: dict[str, int] = {}
    for (topic, _), end in (ends or {}).items():
        produced[topic] = max(end, produced.get(topic, 0))
    return produced


class PipelineLineage:
    """Batches of one pipeline not yet delivered, and the frontier the delivered ones reached."""

    def __init__(self) -> None:
        self._pending: deque[BatchLineage] = deque()
        self._frontier: dict[str, int] = {}
        self._consumed: dict[str, int] = {}

    def add(self, batch: BatchLineage) -> None:
        self._pending.append(batch)
        for topic, end in batch.consumed.items():
            self._consumed[topic] = max(end, self._consumed.get(topic, 0))

    @property
    def pending(self) -> int:
        return len(self._pending)

    def consumed(self, topic: str) -> int:
        """How far finished batches read `topic`, delivered or not."""
        return self._consumed.get(topic, 0)

    def advance(self, delivered: Callable[[str], int]) -> None:
        """Settle leading batches whose every output is below `delivered(output topic)`."""
        while self._pending and all(delivered(t) >= end for t, end in self._pending[0].produced.items()):
            for topic, end in self._pending.popleft().consumed.items():
                self._frontier[topic] = max(end, self._frontier.get(topic, 0))

    def frontier(self, topic: str) -> int:
        """Every record of `topic` below this was read by a batch whose outputs were all delivered."""
        return self._frontier.get(topic, 0)
