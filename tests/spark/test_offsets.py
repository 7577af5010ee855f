"""Admission control and offset parsing of the `contraflow` Spark source (no Spark needed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contraflow.errors import UserError
from contraflow.spark.checkpoint import parse_offsets
from contraflow.spark.datasource import split_ranges
from contraflow.spark.offsets import (
    Ramp,
    parse_starting_offsets,
    plan_end,
    run_count,
    smallest_budget,
    task_records,
    to_partition_offsets,
    to_spark_offset,
)
from contraflow.spark.options import SourceOptions


def test_starting_offsets_keywords_and_json() -> None:
    assert parse_starting_offsets(None).kind == "earliest"
    assert parse_starting_offsets("latest").kind == "latest"
    explicit = parse_starting_offsets('{"0": 5, "2": 7}')
    assert explicit.kind == "explicit" and explicit.explicit == {0: 5, 2: 7}
    kafka_style = parse_starting_offsets('{"events": {"1": 3}}')
    assert kafka_style.explicit == {1: 3}


@pytest.mark.parametrize("bad", ["soon", "[1, 2]", '{"a": 1}', '{"0": "x"}'])
def test_bad_starting_offsets_are_user_errors(bad: str) -> None:
    with pytest.raises(UserError):
        parse_starting_offsets(bad)


def test_spark_offset_uses_string_keys_in_partition_order() -> None:
    assert to_spark_offset({2: 9, 0: 1}) == {"0": 1, "2": 9}


def test_a_run_count_rides_along_the_partitions_without_being_one() -> None:
    spark = to_spark_offset({1: 4, 0: 2}, run=3)
    assert spark == {"0": 2, "1": 4, "run": 3}
    assert to_partition_offsets(spark) == {0: 2, 1: 4}
    assert parse_offsets('{"0": 2, "1": 4, "run": 3}') == {0: 2, 1: 4}
    assert run_count(spark) == 3
    assert run_count(to_spark_offset({0: 2})) == 0 and "run" not in to_spark_offset({0: 2})


@pytest.mark.parametrize(("raw", "wanted"), [(None, False), ("true", True), ("False", False)])
def test_batch_at_start_is_a_flag(raw: str | None, wanted: bool) -> None:
    options = {"topic": "t"} | ({"batchAtStart": raw} if raw is not None else {})
    assert SourceOptions.parse(options).batch_at_start is wanted


def test_a_batch_at_start_that_is_not_a_flag_is_a_user_error() -> None:
    with pytest.raises(UserError, match="batchAtStart must be true or false"):
        SourceOptions.parse({"topic": "t", "batchAtStart": "soon"})


def test_unlimited_budget_reads_everything() -> None:
    assert plan_end({0: 10, 1: 0}, {0: 20, 1: 5}, None) == {0: 20, 1: 5}


def test_zero_budget_reads_nothing() -> None:
    assert plan_end({0: 10, 1: 0}, {0: 20, 1: 5}, 0) == {0: 10, 1: 0}


def test_budget_is_shared_by_backlog() -> None:
    assert plan_end({0: 0, 1: 0}, {0: 300, 1: 100}, 100) == {0: 75, 1: 25}


def test_new_partition_starts_from_zero() -> None:
    assert plan_end({0: 4}, {0: 4, 1: 6}, None) == {0: 4, 1: 6}


@given(
    st.dictionaries(st.integers(0, 7), st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1),
    st.one_of(st.none(), st.integers(0, 3000)),
)
def test_plan_never_exceeds_budget_nor_backlog(
    ranges: dict[int, tuple[int, int]], budget: int | None
) -> None:
    start = {p: a for p, (a, _) in ranges.items()}
    latest = {p: a + b for p, (a, b) in ranges.items()}
    end = plan_end(start, latest, budget)
    taken = sum(end[p] - start[p] for p in start)
    backlog = sum(latest[p] - start[p] for p in start)
    assert all(start[p] <= end[p] <= latest[p] for p in start)
    assert taken == (backlog if budget is None else min(budget, backlog))


def test_smallest_budget() -> None:
    assert smallest_budget(None, None) is None
    assert smallest_budget(10, None, 3) == 3


def test_a_spread_batch_is_cut_into_equal_tasks_a_multiple_of_the_cores() -> None:
    # 400k records at a 160k cap used to be 160k, 160k, 80k: the last task ran alone on one core.
    tasks = split_ranges("t", {0: 0}, {0: 400_000}, task_records(400_000, 160_000, 2))
    assert [r.end - r.start for r in tasks] == [100_000] * 4
    assert task_records(400_000, 160_000, None) == 160_000  # not spread: the cap alone


@given(
    st.integers(min_value=1, max_value=500_000),
    st.integers(min_value=0, max_value=40),
    st.floats(min_value=0, max_value=1, exclude_max=True),
    st.integers(min_value=1, max_value=8),
)
def test_task_records_stay_within_the_cap_and_even(cap: int, full: int, part: float, cores: int) -> None:
    total = max(1, cap * full + int(cap * part))  # up to 41 tasks' worth of records
    sizes = [r.end - r.start for r in split_ranges("t", {0: 0}, {0: total}, task_records(total, cap, cores))]
    assert sum(sizes) == total
    assert max(sizes) <= cap
    assert len(sizes) >= min(cores, total)
    assert max(sizes) - min(sizes) < len(sizes)  # equal but for rounding


def test_a_ramp_doubles_over_a_backlog_and_shrinks_back_when_input_is_slow() -> None:
    ramp = Ramp(100)
    budgets = []
    for waiting in (10_000, 9_900, 9_700, 9_300, 8_500):  # a backlog larger than every budget
        budgets.append(ramp.budget())
        ramp.observe(waiting)
    assert budgets == [100, 200, 400, 800, 1600]
    ramp.observe(1000)  # less than half of 3200 waiting: halve
    assert ramp.budget() == 1600
    for _ in range(10):
        ramp.observe(5)
    assert ramp.budget() == 100  # never below the start
    ramp.observe(80)  # between half and all of the budget: keep it
    assert ramp.budget() == 100
