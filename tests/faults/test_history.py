"""The partition checker catches what it is there to catch: histories written by hand (no
cluster) with one fault each, next to a clean one."""

from __future__ import annotations

from typing import cast

from tests.faults.history import (
    CommittedReader,
    Entry,
    Produce,
    Producer,
    acknowledged_nothing,
    check,
    stops_acknowledging,
)
from tests.faults.netns import Network


def producer(*ops: tuple[list[bytes], float, float, int | None]) -> Producer:
    found = Producer(cast(Network, None), "near", "", "t")  # never started: its history only
    found.ops = [Produce("near", values, sent, done, first) for values, sent, done, first in ops]
    return found


def reader(*seen: tuple[int, bytes]) -> CommittedReader:
    found = CommittedReader("", "t", node="client")
    found.seen = list(seen)
    return found


LOG: list[Entry] = [(0, 1, b"a"), (1, 1, b"b"), (2, 2, b"c")]
CLEAN = producer(([b"a", b"b"], 0.0, 0.1, 0), ([b"x"], 0.1, 1.0, None), ([b"c"], 1.0, 1.1, 2))


def test_a_clean_history_passes() -> None:
    assert check([CLEAN], [reader((0, b"a"), (1, b"b"))], [LOG, LOG, LOG]) == []


def test_each_broken_guarantee_is_reported() -> None:
    other: list[Entry] = [(0, 1, b"a"), (1, 1, b"b"), (2, 1, b"z")]
    assert check([CLEAN], [], [LOG, other, LOG]) == ["replica 1 differs from replica 0 (3 vs 3 records)"]
    twice: list[Entry] = [*LOG, (3, 2, b"a")]
    assert check([], [], [twice] * 3) == ["a record is in the log twice"]
    misplaced = producer(([b"c"], 0.0, 0.1, 1))
    assert check([misplaced], [], [LOG] * 3) == ["near: acknowledged at 1, log has [b'b']"]
    reordered = producer(([b"c"], 0.0, 0.1, 2), ([b"a"], 0.1, 0.2, 0))
    assert check([reordered], [], [LOG] * 3) == ["near: acknowledged records out of order"]
    assert check([], [reader((0, b"a"), (0, b"a"))], [LOG] * 3) == ["reader on client skipped or went back"]
    assert check([], [reader((0, b"q"))], [LOG] * 3) == [
        "reader on client read records the log does not hold: [(0, b'q')]"
    ]


def test_a_cut_off_leader_must_stop_acknowledging_within_a_session() -> None:
    # cut at 0, session 1 s, healed at 4: asking throughout, answered only before 1 s
    asking = producer(([b"a"], 0.0, 0.5, 0), ([b"b"], 0.5, 2.0, None), ([b"c"], 2.05, 3.6, None))
    asking.in_flight_since = 3.65
    assert stops_acknowledging(asking, 0.0, 4.0, 1.0) == []
    acked = producer(([b"a"], 0.0, 1.5, 0), ([b"b"], 1.5, 4.0, None))
    assert stops_acknowledging(acked, 0.0, 4.0, 1.0) == ["near: acknowledged meanwhile: [0]"]
    silent = producer(([b"a"], 0.0, 1.2, None))  # stopped asking: its silence proves nothing
    assert acknowledged_nothing(silent, 1.0, 4.0) == ["near stopped asking for 2.80s"]
    assert stops_acknowledging(asking, 0.0, 1.5, 1.0) == ["the cut was healed too soon to tell"]
