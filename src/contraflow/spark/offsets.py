"""Offsets of the `contraflow` source and how much of them one micro-batch may take.

Spark keeps a source offset as a JSON object; ours maps partition numbers
(as strings, JSON keys) to the next offset to read. Admission control decides
the end offset of a micro-batch from three limits: Spark's read limit
(`maxOffsetsPerTrigger` or the trigger's), and the credit the runtime
publishes on the SPU for back-pressure. The smallest wins; zero credit means
the micro-batch reads nothing.

A source that must run a batch as soon as its query starts (a pipeline whose
timers live in the checkpoint) also counts its query runs under RUN_KEY: a new
count is a new offset, so Spark plans a batch even with no new records. Spark
runs its own empty "no-data" batches only after a batch of the same run, so
without this a query stopped between batches would never fire a pending timer
until input arrived.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from contraflow.errors import UserError

PartitionOffsets = dict[int, int]
RUN_KEY = "run"


@dataclass(frozen=True)
class StartingOffsets:
    """`earliest`, `latest`, or explicit offsets per partition (missing partitions: earliest)."""

    kind: str
    explicit: PartitionOffsets | None = None


def parse_starting_offsets(text: str | None) -> StartingOffsets:
    """Parse the `startingOffsets` option like Spark's Kafka source: a keyword or a JSON map."""
    if text is None or text.strip().lower() in ("", "earliest"):
        return StartingOffsets("earliest")
    if text.strip().lower() == "latest":
        return StartingOffsets("latest")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"startingOffsets must be earliest, latest or a JSON object, not {text!r}") from err
    # Accept both {"0": 5} and Kafka's {"topic": {"0": 5}}.
    if isinstance(raw, dict) and len(raw) == 1 and isinstance(next(iter(raw.values())), dict):
        raw = next(iter(raw.values()))
    if not isinstance(raw, dict):
        raise UserError(f"startingOffsets JSON must map partitions to offsets, not {text!r}")
    return StartingOffsets("explicit", to_partition_offsets(raw))


def to_partition_offsets(raw: Mapping[str, object]) -> PartitionOffsets:
    """Spark's JSON offset (string keys) to {partition: offset}; -2 means earliest, -1 latest."""
    result: PartitionOffsets = {}
    for key, value in raw.items():
        if key == RUN_KEY:  # not a partition
            continue
        try:
            partition, offset = int(key), int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError) as err:
            raise UserError(f"bad offset {key!r}: {value!r} (partitions and offsets are integers)") from err
        result[partition] = offset
    return result


def run_count(raw: Mapping[str, object]) -> int:
    """How many query runs asked for a batch at start before this offset (see RUN_KEY)."""
    value = raw.get(RUN_KEY, 0)
    return value if isinstance(value, int) else 0


def to_spark_offset(offsets: PartitionOffsets, run: int = 0) -> dict[str, int]:
    """{partition: offset} (and the run count, when there is one) to the JSON object Spark
    stores in its offset log."""
    spark = {str(p): o for p, o in sorted(offsets.items())}
    if run:
        spark[RUN_KEY] = run
    return spark


def plan_end(start: PartitionOffsets, latest: PartitionOffsets, budget: int | None) -> PartitionOffsets:
    """End offsets of the next micro-batch when at most `budget` records may be read.

    The budget is shared in proportion to each partition's backlog (as Spark's
    Kafka source does with `maxOffsetsPerTrigger`), rounding down, then the
    remainder goes to the partitions with the largest backlog so no record of
    budget is wasted and no partition starves. `budget=None` takes everything.
    """
    backlog = {p: max(0, latest.get(p, o) - o) for p, o in start.items()}
    for p, end in latest.items():
        backlog.setdefault(p, end)
    begin = {p: start.get(p, latest[p] - backlog[p]) for p in backlog}
    total = sum(backlog.values())
    if budget is None or total <= budget:
        return {p: begin[p] + backlog[p] for p in backlog}
    if budget <= 0:
        return dict(begin)
    share = {p: backlog[p] * budget // total for p in backlog}
    remainder = budget - sum(share.values())
    for p in sorted(backlog, key=lambda q: (share[q] - backlog[q], q)):
        if remainder == 0:
            break
        if share[p] < backlog[p]:
            share[p] += 1
            remainder -= 1
    return {p: begin[p] + share[p] for p in backlog}


@dataclass
class Ramp:
    """Slow start for micro-batches over a backlog: small first batches, then doubling.

    A query that starts (or wakes up) in front of a large backlog would take
    all of it in its first batch, and nothing would come out until that batch
    ended. With a ramp the first batch reads `start` records, and each batch
    that found more waiting than it was allowed doubles the next one's
    budget, so within a few batches they are as large as the other limits
    allow (large batches amortize Spark's fixed cost per batch). A batch
    that found less than half its budget waiting halves it again (not below
    `start`): slow input keeps small, quick batches.
    """

    start: int
    current: int = 0

    def __post_init__(self) -> None:
        self.current = self.current or self.start

    def budget(self) -> int:
        return self.current

    def observe(self, waiting: int) -> None:
        """The records waiting when a batch was planned with the current budget."""
        if waiting > self.current:
            self.current *= 2
        elif waiting < self.current // 2:
            self.current = max(self.start, self.current // 2)


def task_records(total: int, cap: int, cores: int | None) -> int:
    """Records per read task for a batch of `total` records: at most `cap`, and, when the batch
    should spread over `cores`, a task count that is a multiple of them with tasks of equal size.

    Capping alone left a short last task (400k records at a 160k cap: 160k, 160k, 80k), which ran
    on one core while the other idled: a quarter of the read stage's wall time on two cores.
    """
    cap = max(1, cap)
    if not cores or total <= 0:
        return cap
    tasks = -(-total // cap)
    tasks = -(-tasks // cores) * cores
    return max(1, -(-total // tasks))


def smallest_budget(*budgets: int | None) -> int | None:
    """The tightest of several optional record budgets (None means unlimited)."""
    present = [b for b in budgets if b is not None]
    return min(present) if present else None
