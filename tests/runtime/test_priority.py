"""Priorities: a critical and a background flow over the same backlog (benchmarks/priority.py's race).

The background flow starts first, yet the critical one reads its whole backlog
first, and the background one has had batches meanwhile (neither starves);
every background batch stays within its admission while critical batches are
larger. How much faster critical runs is a throughput ratio, measured by the
benchmark, not asserted here: it is a ratio of batch durations, which the
box's load moves (a full run once measured 2.99997 against a bound of 3). The
mechanisms behind it (FAIR pools with minShare, per-batch admission, sources'
turns) are checked on their own below.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from benchmarks.priority import race

from contraflow.api.facade import Priority
from contraflow.runtime.priority import PRIORITY_CLASSES, YIELD_CEILING, YieldBudget, admitted
from contraflow.spark.pools import POOLS, pool_name

BACKLOG = 60_000  # events per flow: more than a critical batch (a 50k channel), 12 background ones


def test_a_critical_flow_outruns_a_background_one_and_neither_starves(
    spark: Any, spu_addr: str, tmp_path: Path
) -> None:
    result = asyncio.run(race(spu_addr, spark, tmp_path, BACKLOG, ("background", "critical"), 120.0))
    background, critical = result["events_out"].values()
    assert critical == BACKLOG > background > 0, result  # critical drained first; background ran too
    largest_background, largest_critical = result["largest_batch"].values()
    assert 0 < largest_background <= admitted("background", None) < largest_critical, result


def test_every_priority_is_a_fair_pool_with_its_weight_and_min_share(spark: Any) -> None:
    pools = {p.name(): p for p in _iterate(spark.sparkContext._jsc.sc().getAllPools())}
    for name, (weight, min_share) in POOLS.items():
        assert pools[pool_name(name)].weight() == weight and pools[pool_name(name)].minShare() == min_share


def test_idle_pools_are_served_in_priority_order(spark: Any) -> None:
    """With no task running in either, FAIR orders two pools by name: a pool's name must sort as
    its priority does, or "background" and "low" go before "normal"."""
    order = spark._jvm.org.apache.spark.scheduler.FairSchedulingAlgorithm()
    context = spark.sparkContext._jsc.sc()
    pools = [context.getPoolForName(pool_name(name)).get() for name in POOLS]
    assert all(pool.runningTasks() == 0 for pool in pools)
    for higher, lower in zip(pools, pools[1:], strict=False):
        assert order.comparator(higher, lower) and not order.comparator(lower, higher)


def test_inside_a_pool_a_newer_stage_never_goes_first_by_its_name(spark: Any) -> None:
    """Spark names a stage's tasks "TaskSet_<stage>.<attempt>"; FAIR order inside a pool breaks
    ties by comparing those names as strings (stage 1000 before 999), which on a saturated box
    starves a stage whose id sorts late. The pools order their stages FIFO instead."""
    scheduler = spark._jvm.org.apache.spark.scheduler
    older, newer = (
        scheduler.Pool(f"TaskSet_{stage}.0", scheduler.SchedulingMode.FAIR(), 0, 1) for stage in (999, 1000)
    )
    assert scheduler.FairSchedulingAlgorithm().comparator(newer, older)  # the order FAIR would give
    for name in POOLS:
        pool = spark.sparkContext._jsc.sc().getPoolForName(pool_name(name)).get()
        assert pool.schedulingMode().toString() == "FIFO"
        assert not pool.taskSetSchedulingAlgorithm().comparator(newer, older)


def _iterate(scala_seq: Any) -> list[Any]:
    iterator = scala_seq.iterator()
    found = []
    while iterator.hasNext():
        found.append(iterator.next())
    return found


def test_admission_caps_the_credit_by_priority() -> None:
    assert admitted("background", None) == PRIORITY_CLASSES["background"].admission
    assert admitted("background", 10) == 10  # the room downstream still wins when smaller
    room = 10_000_000
    assert (
        admitted("background", room)
        < admitted("normal", room)
        < admitted("high", room)
        < admitted("critical", room)
    )
    assert admitted("critical", 0) == 0  # back-pressure stops every priority


def test_sources_yield_after_their_priority_budget() -> None:
    async def turns_given_away(priority: Priority, events: int, quantum_s: float = 3600.0) -> int:
        """How often another task got the loop while a source spent `events` one by one."""
        budget = YieldBudget(priority, quantum_s)
        ran = 0

        async def other() -> None:
            nonlocal ran
            while True:
                ran += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        before = ran
        for _ in range(events):
            await budget.spend(1)
        task.cancel()
        return ran - before

    assert asyncio.run(turns_given_away("background", 64)) == 8  # every 8 events
    assert asyncio.run(turns_given_away("normal", 64)) == 2  # every 32
    assert asyncio.run(turns_given_away("critical", 256)) == 2  # every 128
    assert asyncio.run(turns_given_away("critical", 10, quantum_s=0.0)) == 10  # the time quantum
    assert all(c.yield_events <= YIELD_CEILING for c in PRIORITY_CLASSES.values())
