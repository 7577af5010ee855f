"""Holding a sink's channel offsets until the sink says its events are delivered.

A sink's offset is normally committed once `send` returns. A holding sink
(`Connector.holds_deliveries`: an object store's streamer) takes events into
something that only exists once complete, a multipart upload; its `send`
returning says nothing about delivery. The `DeliveryHold` sits between the
sink pump and the offset commits: the pump records what it handed over
(`taken`), the sink releases what is delivered (`ctx.release(marks)`), and
only released offsets are committed, in order, per channel. A crash before
the release leaves the offset where it was: the events come again.

Events the pump sent to `err` instead (they could not be encoded or
delivered) need no release of their own: they are committed with the next
events of their channel the sink releases.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

Advance = Callable[[int], None]  # commit "everything before this offset is delivered" (trailing)


class DeliveryHold:
    """One holding sink's channels: what the pump handed over, what the sink released (and so committed)."""

    def __init__(self) -> None:
        self._advances: dict[str, Advance] = {}
        self.released: dict[str, int] = {}  # channel -> next offset to commit
        self.taken: dict[str, int] = {}  # channel -> next offset the pump hands over

    def watch(self, channel: str, committed: int, advance: Advance) -> None:
        """The pump tails `channel` from `committed`; `advance` commits an offset after it."""
        self._advances[channel] = advance
        self.released[channel] = self.taken[channel] = committed

    def take(self, channel: str, next_offset: int) -> None:
        """The pump hands the sink every event of `channel` before `next_offset` (before `send`, since
        the sink may complete, and release, part of a batch while taking it)."""
        self.taken[channel] = next_offset

    def taken_of(self, channel: str) -> int:
        """The next offset of `channel` the pump hands over (0 before its tail started)."""
        return self.taken.get(channel, 0)

    def release(self, marks: Mapping[str, int]) -> None:
        """The sink delivered, per channel, every event up to the marked offset: commit past it.

        A mark beyond what was handed over is a sink's bug (it would skip events on a crash)."""
        for channel, last in marks.items():
            advance = self._advances.get(channel)
            following = last + 1
            if advance is None or following <= self.released[channel]:
                continue
            if following > self.taken[channel]:
                raise ValueError(f"release of {channel} up to {last}: only {self.taken[channel]} handed over")
            self.released[channel] = following
            advance(following)
