"""Replica assignment: spread leaders and replicas evenly over the SPUs.

Partition p of a new topic gets the SPUs at positions start+p, start+p+1, ...
of the sorted live SPUs, its leader first; `start` is the SPU that leads the
fewest partitions so far, so a newly added SPU gets the next topic's leaders.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def assign_replicas(
    partitions: int, replication_factor: int, spus: Iterable[int], leaders_so_far: Counter[int]
) -> list[list[int]]:
    """Replica lists (leader first) for `partitions` partitions; raises ValueError when
    fewer SPUs are alive than the replication factor asks for."""
    ids = sorted(spus)
    if len(ids) < replication_factor:
        raise ValueError(
            f"replication factor {replication_factor} needs {replication_factor} live SPUs, "
            f"the cluster has {len(ids)}"
        )
    start = min(range(len(ids)), key=lambda i: (leaders_so_far[ids[i]], i))
    return [[ids[(start + p + r) % len(ids)] for r in range(replication_factor)] for p in range(partitions)]
