"""Partial aggregation before the shuffle, without Spark: the aggregates' exact partials, which
pipelines fold, and the folded path against the per-event path on generated events.

The differential tests run both paths through the real read-task and stateful
code (`partial_harness`) and compare every output, in order, and the state
after every micro-batch (what a restart, or `contraflow state export`, sees).
"""

from __future__ import annotations

import contextlib
from functools import cache
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contraflow.lang.graph import PipelineGraph
from contraflow.lang.script.aggr import AGGREGATES, Aggregate, Count, First, Last, Max, Min
from contraflow.pipeline.executor import Traced
from contraflow.pipeline.local import compile_query
from contraflow.pipeline.spark.partial import PartialAggregation, partial_select
from contraflow.pipeline.spark.plan import COLUMNAR_SWITCH
from contraflow.pipeline.spark.split import split_prefix
from tests.pipeline.spark.partial_harness import SourceBatch, TwoStages


@pytest.fixture(params=["per-event prefix", "columnar prefix"])
def prefix(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test that runs prefixes, once after a per-event prefix (the fold reads its decoded items)
    and once after a columnar one (these prefixes vectorize: count/min/max/first/last fold on its columns
    where they answer every row of a batch; other batches and selects are not folded)."""
    monkeypatch.setenv(COLUMNAR_SWITCH, "off" if request.param == "per-event prefix" else "on")
    return str(request.param)


def pipeline(windows: str, select: str, key: str = "event.k") -> str:
    """The partial tests' pipelines: a prefix keeps `event.keep` events and puts `key` in `$k`,
    then `windows` and the windowed `select` over it (grouped by `$k` or not)."""
    return f"""
define script tag
script
  let $k = {key};
  event
end;
create script tag;
select event from in where event.keep into tag;
{windows}{select}"""


EVENT_TIME = "define window w from tumbling with interval = 100 script event.ts end;\n"
COUNT = pipeline(
    EVENT_TIME, 'select {"k": group[0], "n": aggr::stats::count()} from tag[w] group by $k into out;'
)
EXTREMES = pipeline(
    EVENT_TIME,
    'select {"k": group[0], "lo": aggr::stats::min(event.v), "hi": aggr::stats::max(event.v), '
    '"first": aggr::win::first(event.v), "last": aggr::win::last(event.v)} '
    "from tag[w] group by $k into out having event.lo != 3;",
)
TILTED = pipeline(
    EVENT_TIME + "define window big from tumbling with size = 2 end;\n",
    'select {"k": group[0], "w": window, "n": aggr::stats::count(), "e": event.ts} '
    "from tag[w, big] group by $k into out;",
)
LIMITED = pipeline(
    "define window w from tumbling with interval = 100, max_groups = 2 script event.ts end;\n",
    'select {"k": group[0], "n": aggr::stats::count(), "c": win::cardinality()} from tag[w] group by $k into out;',
)
INGEST_TIME = pipeline(
    "define window w from tumbling with interval = 2000000 end;\n",
    'select {"k": group[0], "n": aggr::stats::count()} from tag[w] group by $k into out;',
)
UNGROUPED = pipeline(
    EVENT_TIME, 'select {"n": aggr::stats::count(), "hi": aggr::stats::max(event.v)} from tag[w] into out;'
)
FOLDED = {
    "count": COUNT,
    "extremes": EXTREMES,
    "tilted": TILTED,
    "limited": LIMITED,
    "ingest": INGEST_TIME,
    "ungrouped": UNGROUPED,
}


@cache
def _compiled(text: str) -> PipelineGraph:
    return compile_query(text, name="q.trickle")


def _rest_select(text: str) -> str | None:
    split = split_prefix(_compiled(text))
    assert split is not None
    return partial_select(split.rest)


@pytest.mark.parametrize("name", sorted(FOLDED))
def test_these_pipelines_fold(name: str) -> None:
    assert _rest_select(FOLDED[name]) is not None


@pytest.mark.parametrize(
    ("windows", "select"),
    [
        # a float sum rounds differently when split
        (EVENT_TIME, "select aggr::stats::sum(event.v) from tag[w] group by $k into out;"),
        (EVENT_TIME, "select aggr::stats::mean(event.v) from tag[w] group by $k into out;"),
        # a count window closes on a count the read task cannot know
        (
            "define window w from tumbling with size = 3 end;\n",
            "select aggr::stats::count() from tag[w] into out;",
        ),
        (
            "define window w from sliding with interval = 100, slide = 50 script event.ts end;\n",
            "select aggr::stats::count() from tag[w] into out;",
        ),
        # one event in several groups
        (EVENT_TIME, "select aggr::stats::count() from tag[w] group by set($k, event.v) into out;"),
        # windows closed by the watermark: a late event must reach `err`, sessions merge
        (
            "define window w from tumbling with interval = 100, lateness = 10 script event.ts end;\n",
            "select aggr::stats::count() from tag[w] group by $k into out;",
        ),
        (
            "define window w from session with gap = 100 script event.ts end;\n",
            "select aggr::stats::count() from tag[w] group by $k into out;",
        ),
    ],
)
def test_these_pipelines_keep_the_per_event_path(windows: str, select: str) -> None:
    assert _rest_select(pipeline(windows, select)) is None


# -- the aggregates' partials ----------------------------------------------------------------------

NUMBERS = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True))
SCALARS = st.one_of(
    NUMBERS, st.text(max_size=3), st.booleans(), st.none(), st.lists(st.integers(), max_size=2)
)


def _state(agg: Aggregate) -> str:
    """The aggregate's state, types included (1, 1.0 and True differ)."""
    return repr(agg.snapshot())


@pytest.mark.parametrize("cls", [Count, Min, Max, First, Last])
@given(before=st.lists(SCALARS, max_size=6), run=st.lists(SCALARS, max_size=6))
@settings(max_examples=150, deadline=None)
def test_absorbing_a_partial_is_accumulating_its_values_one_by_one(
    cls: type[Aggregate], before: list[Any], run: list[Any]
) -> None:
    """Where the partial takes every value of the run, folding it in equals accumulating them; a
    value it refuses (the event then stays ordinary) is one `accumulate` refuses too or one JSON
    cannot carry exactly."""
    one_by_one, folded = cls(), cls()
    for value in before:
        for agg in (one_by_one, folded):
            with contextlib.suppress(Exception):  # both refuse it alike
                agg.accumulate(value)
    partial = cls.EMPTY_PARTIAL
    try:
        for value in run:
            partial = cls.add_to_partial(partial, value)
    except Exception:  # noqa: BLE001
        return
    for value in run:
        one_by_one.accumulate(value)
    folded.absorb(orjson.loads(orjson.dumps(partial)))  # as it crosses in the envelope
    assert _state(folded) == _state(one_by_one)


def test_only_exact_aggregates_have_partials() -> None:
    exact = {name for name, cls in AGGREGATES.items() if cls.partial_exact}
    assert exact == {
        "aggr::stats::count",
        "aggr::stats::min",
        "aggr::stats::max",
        "aggr::win::first",
        "aggr::win::last",
    }


# -- the folded path against the per-event path ---------------------------------------------------

KEYS = st.one_of(st.sampled_from(["a", "b", "c"]), st.integers(0, 2), st.just(1.0), st.booleans(), st.none())
EVENT = st.fixed_dictionaries(
    {
        "ts": st.one_of(st.integers(0, 600), st.integers(0, 600), st.just("late")),
        "k": st.one_of(KEYS, KEYS, st.lists(st.integers(0, 1), max_size=1)),
        "v": st.one_of(st.integers(-5, 5), st.floats(-5, 5), st.just("x")),
        "keep": st.one_of(st.just(True), st.just(True), st.just(False), st.just(1)),
    }
)
# A micro-batch: source batches (partition, events, how many share each log timestamp).
SOURCE = st.tuples(st.integers(0, 1), st.lists(EVENT, max_size=25), st.integers(1, 8))
MICRO_BATCHES = st.lists(st.tuples(st.lists(SOURCE, min_size=1, max_size=2), st.booleans()), max_size=5)


def _source_batches(
    micro: list[tuple[int, list[Any], int]], clock: list[int], offsets: dict[int, int]
) -> list[SourceBatch]:
    batches = []
    for partition, events, run in micro:
        stamps = []
        for index in range(len(events)):
            if index % run == 0:
                clock[0] += 1
            stamps.append(clock[0])
        batches.append(SourceBatch(partition, offsets.get(partition, 0), events, stamps))
        offsets[partition] = offsets.get(partition, 0) + len(events)
    return [b for b in batches if b.values]


@pytest.mark.usefixtures("prefix")
@pytest.mark.parametrize("name", sorted(FOLDED))
@given(micro_batches=MICRO_BATCHES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_folded_and_per_event_paths_agree(name: str, micro_batches: list[Any]) -> None:
    """Same outputs in the same order per output (err events included; the per-event path does
    not keep the order across outputs either) and the same state after every micro-batch, across restarts, with events out of order in and across batches and partitions."""
    graph = _compiled(FOLDED[name])
    per_event, folded = TwoStages(graph, fold=False), TwoStages(graph, fold=True)
    assert folded.folds and not per_event.folds
    clock, offsets = [1_000], {}  # type: ignore[var-annotated]
    for micro, restart in micro_batches:
        batches = _source_batches(micro, clock, offsets)
        if not batches:
            continue
        for stages in (per_event, folded):
            stages.micro_batch(batches)
            if restart:
                stages.restart()
        assert folded.by_topic() == per_event.by_topic()
        assert folded.snapshot() == per_event.snapshot()


@pytest.mark.usefixtures("prefix")
def test_folding_sends_one_row_per_segment() -> None:
    """Events of a group at or before its segment's head time, with one log timestamp, cross as
    one row; the window counts them all."""
    graph = _compiled(COUNT)
    per_event, folded = TwoStages(graph, fold=False), TwoStages(graph, fold=True)
    events = [{"ts": ts, "k": k, "keep": True, "v": 1} for ts in (10, 5, 10, 7, 150, 20) for k in ("a", "b")]
    for stages in (per_event, folded):
        stages.micro_batch([SourceBatch(0, 0, events[:8], [1] * 8)])
        stages.micro_batch([SourceBatch(0, 8, events[8:], [2] * 4)])
    assert per_event.crossed == 12
    assert folded.crossed == 4  # a and b: one segment each per batch (20 <= 150 joins 150's)
    assert folded.outputs == per_event.outputs == [("o", {"k": "a", "n": 4}), ("o", {"k": "b", "n": 4})]


def test_outputs_of_a_prefix_run_event_by_event_are_not_folded() -> None:
    """After a failure the prefix runs one event at a time and keeps no items: nothing to fold."""
    split = split_prefix(_compiled(COUNT))
    assert split is not None
    select = partial_select(split.rest)
    assert select is not None
    traced = Traced([split.cut_ports[0]] * 2, [b"1", b"2"], [None, None], [0, 1])
    rows, partials = PartialAggregation(split.rest, select, split.cut_ports[0]).collapse(
        traced, pa.array([5, 5], pa.int64())
    )
    assert rows is traced and partials.to_pylist() == [None, None]


def test_rising_times_cross_as_one_row_per_group_and_close_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a columnar prefix, a count-only select whose close needs no event takes a group's
    rising times in one segment: one row per group and batch crosses, and each window still
    closes on its event's place (between the other group's closes, as per event)."""
    monkeypatch.setenv(COLUMNAR_SWITCH, "on")
    graph = _compiled(LIMITED)
    per_event, folded = TwoStages(graph, fold=False), TwoStages(graph, fold=True)
    events = [{"ts": 30 * i + 7 * (i % 3), "k": "abc"[i % 3], "keep": True} for i in range(60)]
    for stages in (per_event, folded):
        stages.micro_batch([SourceBatch(0, 0, events[:40], [1] * 40)])
        stages.micro_batch([SourceBatch(0, 40, events[40:], [2] * 20)])
    assert per_event.crossed == 60
    assert folded.crossed == 6  # a, b and c (turned away by max_groups, all its events alike) per batch
    assert folded.outputs == per_event.outputs
    assert len(per_event.outputs) >= 10
    assert folded.snapshot() == per_event.snapshot()


def test_extremes_fold_on_a_columnar_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a columnar prefix min/max/first/last fold on its columns: one row per segment crosses,
    and the head's and the rest's partials give the per-event outputs and state. A batch with a
    row the columns do not answer (a float where the batch's `v` are integers) is not folded."""
    monkeypatch.setenv(COLUMNAR_SWITCH, "on")
    graph = _compiled(EXTREMES)
    per_event, folded = TwoStages(graph, fold=False), TwoStages(graph, fold=True)
    values = [4, -2, 9, 9, 1, -7, 5, 3]
    events = [{"ts": 20 - i, "k": "ab"[i % 2], "keep": True, "v": v} for i, v in enumerate(values)]
    floats = [{"ts": 30, "k": "a", "keep": True, "v": v} for v in (1, 2.5)]
    closing = [{"ts": 500, "k": k, "keep": True, "v": 0} for k in "ab"]
    for stages in (per_event, folded):
        stages.micro_batch([SourceBatch(0, 0, events, [1] * 8)])
        stages.micro_batch([SourceBatch(0, 8, floats, [2, 2])])
        stages.micro_batch([SourceBatch(0, 10, closing, [3, 3])])
    assert per_event.crossed == 12
    assert folded.crossed == 2 + 2 + 2  # a and b: one segment each; the floats' batch as it is
    assert folded.outputs == per_event.outputs
    assert folded.outputs[0] == ("o", {"k": "a", "lo": 1.0, "hi": 9.0, "first": 4, "last": 2.5})
    assert folded.snapshot() == per_event.snapshot()


# Events the columns answer (one type per field), so batches fold with later steps.
CLEAN_SOURCE = st.tuples(
    st.integers(0, 1),
    st.lists(
        st.fixed_dictionaries(
            {
                "ts": st.integers(0, 600),
                "k": st.sampled_from("abc"),
                "keep": st.booleans(),
                "v": st.integers(-(2**63), 2**63 - 1) | st.integers(-5, 5),
            }
        ),
        max_size=30,
    ),
    st.integers(1, 12),
)


@pytest.mark.parametrize("name", ["count", "limited", "extremes", "ungrouped"])
@given(
    micro_batches=st.lists(
        st.tuples(st.lists(CLEAN_SOURCE, min_size=1, max_size=2), st.booleans()), max_size=4
    )
)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_later_steps_agree_with_the_per_event_path(name: str, micro_batches: list[Any]) -> None:
    """`test_folded_and_per_event_paths_agree` on events a columnar prefix answers whole: segments
    with later steps, windows closing on them (count-only selects), min/max/first/last folded on
    columns, across partitions and restarts."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(COLUMNAR_SWITCH, "on")
        graph = _compiled(FOLDED[name])
        # Keyed by group stream where the query would: an envelope holds some groups' rows only.
        per_event, folded = TwoStages(graph, fold=False), TwoStages(graph, fold=True, streams=True)
        clock, offsets = [1_000], {}  # type: ignore[var-annotated]
        for micro, restart in micro_batches:
            batches = _source_batches(micro, clock, offsets)
            for stages in (per_event, folded) if batches else ():
                stages.micro_batch(batches)
                if restart:
                    stages.restart()
            assert _by_group(folded.outputs) == _by_group(per_event.outputs)
            assert _groups(folded) == _groups(per_event)


def _by_group(outputs: list[tuple[str, Any]]) -> dict[str, list[Any]]:
    """Each group's outputs in order (group streams interleave different groups' outputs)."""
    groups: dict[str, list[Any]] = {}
    for topic, value in outputs:
        groups.setdefault(orjson.dumps([topic, value.get("k")]).decode(), []).append(value)
    return groups


def _groups(stages: TwoStages) -> list[bytes]:
    """Every key's window groups, sorted, and their drops (what the keys hold together)."""
    found, dropped = [], 0
    for state in orjson.loads(stages.snapshot()).values():
        for node in state.values():
            if node is not None:
                found += [orjson.dumps(group) for group in node["groups"]]
                dropped += node["dropped"]
    return [*sorted(found), orjson.dumps(dropped)]
