"""What a holding sink has taken, per channel: the offset of the last event, for `ctx.release`.

A holding sink (an object store's streamer) keeps one `DeliveryMarks` per
thing it delivers as a whole (the object being uploaded) and releases it when
that thing is complete. It also tells events it took already: after a lost
connection the runtime sends the same batch again, and the sink must not take
an event twice.
"""

from __future__ import annotations

from contraflow.connectors.base.connector import SinkEvent


class DeliveryMarks:
    """Channel topic -> offset of the last event taken from it."""

    def __init__(self) -> None:
        self.offsets: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self.offsets)

    def add(self, event: SinkEvent) -> None:
        """Take `event`; events of one channel come in offset order."""
        self.offsets[event.channel] = max(event.offset, self.offsets.get(event.channel, -1))

    def covers(self, event: SinkEvent) -> bool:
        """True when `event` was taken already (a batch sent again after a lost connection)."""
        return event.offset <= self.offsets.get(event.channel, -1)

    def merge(self, other: DeliveryMarks) -> None:
        """Take everything `other` took too."""
        for channel, offset in other.offsets.items():
            self.offsets[channel] = max(offset, self.offsets.get(channel, -1))
