"""Spark FAIR scheduler pools, one per flow priority.

Spark's FAIR scheduler first serves pools running fewer tasks than their
`minShare`, then divides the rest by `weight`. On a box with two cores the
weights alone hardly matter (a pool with one task running already has its
"share"); `minShare` is what lets a critical query's tasks go first whenever
it has any. The file is written next to the data directory when the session
is built (`spark.scheduler.allocation.file` must be known before the
SparkContext starts).

Inside a pool, stages run first come, first served (FIFO: by job, then stage). Spark's FAIR
order inside a pool breaks ties by name, "TaskSet_<stage id>.<attempt>" compared as strings,
so stage 1000 goes before stage 999: on a saturated box (many flows of one priority) a stage
whose id sorts late waits for as long as newer stages keep coming.

Between pools FAIR breaks ties by pool name too: with no tasks running, "background" and "low"
would be served before "normal". A pool's name is therefore its priority behind its rank
("2-normal"), so names sort as priorities do.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import quoteattr

# pool name -> (weight, minShare in cores); the names are the flow priorities.
POOLS: dict[str, tuple[int, int]] = {
    "critical": (32, 2),
    "high": (16, 1),
    "normal": (8, 0),
    "low": (2, 0),
    "background": (1, 0),
}


def pool_name(pool: str) -> str:
    """The Spark pool of a priority ("2-normal"); any other name is taken as a pool's own name."""
    ranks = {priority: rank for rank, priority in enumerate(POOLS)}
    return f"{ranks[pool]}-{pool}" if pool in ranks else pool


def allocation_xml() -> str:
    """Spark's fair scheduler allocation file for `POOLS`."""
    pools = "".join(
        f"  <pool name={quoteattr(pool_name(name))}>\n"
        "    <schedulingMode>FIFO</schedulingMode>\n"
        f"    <weight>{weight}</weight>\n"
        f"    <minShare>{min_share}</minShare>\n"
        "  </pool>\n"
        for name, (weight, min_share) in POOLS.items()
    )
    return f'<?xml version="1.0"?>\n<allocations>\n{pools}</allocations>\n'


def write_allocation_file(root: Path) -> Path:
    """Write (or keep, when unchanged) `{root}/fair-pools.xml`; returns its path."""
    path = root.resolve() / "fair-pools.xml"
    text = allocation_xml()
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path
