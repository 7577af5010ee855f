"""Turning out-of-order acks and fails into one position a source can commit.

A source hands out data under tokens, each covering a range of its input (a
byte range of a file, a record offset of a log). Acks come back in any order,
but a source can only persist "everything before X is done": the position
advances over the longest prefix of acknowledged tokens. A fail rewinds to the
start of the failed range, so the data is read again (at-least-once).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class _Range:
    start: int
    end: int
    acked: bool = False


class AckWindow:
    """Tokens issued in input order, each covering `[start, end)` of a position space."""

    def __init__(self, committed: int = 0) -> None:
        self.committed = committed
        self._open: OrderedDict[int, _Range] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def issue(self, token: int, start: int, end: int) -> None:
        """Record that `token` covers `[start, end)`; tokens must be issued in input order."""
        self._open[token] = _Range(start, end)

    def ack(self, token: int) -> int | None:
        """Mark `token` done; the new committed position if the done prefix grew, else None."""
        entry = self._open.get(token)
        if entry is None:
            return None
        entry.acked = True
        advanced = None
        while self._open:
            first_token, first = next(iter(self._open.items()))
            if not first.acked:
                break
            del self._open[first_token]
            self.committed = advanced = first.end
        return advanced

    def fail(self, token: int) -> int | None:
        """Forget `token` and everything issued after it; the position to read again from.

        None when the token is unknown (already acked, or dropped by an earlier fail)."""
        entry = self._open.get(token)
        if entry is None:
            return None
        for later in [t for t in self._open if t >= token]:
            del self._open[later]
        return entry.start
