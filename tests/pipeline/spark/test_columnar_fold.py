"""The fold on a columnar prefix's columns (`contraflow.pipeline.spark.columnar_fold`) against the
fold event by event, on the same prefix outputs: the same rows left, the same segment bytes.

(The whole folded path after a columnar prefix, outputs and state across micro-batches and
restarts, is compared with the per-event path in `test_partial`.)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contraflow.pipeline.columnar import ColumnarPlan
from contraflow.pipeline.executor import PipelineExecutor, Traced
from contraflow.pipeline.item import UNDECODED
from contraflow.pipeline.spark.partial import PartialAggregation, partial_select
from contraflow.pipeline.spark.split import split_prefix
from tests.pipeline.spark.test_partial import COUNT, EVENT_TIME, INGEST_TIME, _compiled, pipeline


def with_items(traced: Traced) -> Traced:
    """`traced` with an undecoded item per output (its bytes, its metadata decoded): what the fold
    event by event reads."""
    items = [
        [UNDECODED, orjson.loads(meta) if meta else None, value]
        for value, meta in zip(traced.values, traced.metas, strict=True)
    ]
    return Traced(traced.ports, traced.values, traced.metas, traced.sources, items)


# The select's own `where` (false drops, true keeps) and a window time that may be negative (the
# window script fails: an ordinary event, ending every open segment).
FILTERED = pipeline(
    EVENT_TIME,
    'select {"k": group[0], "n": aggr::stats::count(), "m": aggr::stats::count()} '
    "from tag[w] where event.ok group by $k into out;",
)
# Every aggregate the fold on columns carries: integers for min/max, the group value (a string, an
# integer or a bool) for first/last.
AGGREGATES = pipeline(
    EVENT_TIME,
    'select {"lo": aggr::stats::min(event.v), "hi": aggr::stats::max(event.v), "n": aggr::stats::count(), '
    '"f": aggr::win::first(event.k), "l": aggr::win::last(event.k)} from tag[w] group by $k into out;',
)
CLEAN_EVENT = st.fixed_dictionaries(
    {
        "ts": st.integers(-3, 400),
        "k": st.integers(0, 2),
        "ok": st.booleans(),
        "keep": st.just(True),
        "v": st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 3),
    }
)


# A window time that is not an integer field (a literal): the fold reads it from its JSON text.
LITERAL_TIME = pipeline(
    "define window w from tumbling with interval = 100 script 5 end;\n",
    'select {"k": group[0], "n": aggr::stats::count()} from tag[w] group by $k into out;',
)


@pytest.mark.parametrize(
    "name", ["count", "ingest", "ungrouped-count", "filtered", "aggregates", "literal-time"]
)
@given(
    events=st.lists(CLEAN_EVENT, min_size=1, max_size=40),
    run=st.integers(1, 12),
    key_type=st.sampled_from(["str", "int", "bool"]),
)
@settings(max_examples=25, deadline=None)
def test_the_fold_on_columns_makes_the_event_by_event_segments(
    name: str, events: list[Any], run: int, key_type: str
) -> None:
    """On a batch the columns answer, the columnar fold leaves the same rows with the same segment
    bytes as the fold event by event on the same outputs."""
    text = {
        "count": COUNT,
        "ingest": INGEST_TIME,
        "ungrouped-count": pipeline(EVENT_TIME, 'select {"n": aggr::stats::count()} from tag[w] into out;'),
        "filtered": FILTERED,
        "aggregates": AGGREGATES,
        "literal-time": LITERAL_TIME,
    }[name]
    as_type = {"str": lambda k: "abc"[k], "int": int, "bool": lambda k: k > 0}[key_type]
    events = [{**e, "k": as_type(e["k"])} for e in events]  # one type: the prefix's columns read all
    split = split_prefix(_compiled(text))
    assert split is not None
    select = partial_select(split.rest)
    assert select is not None
    folding = PartialAggregation(split.rest, select, split.cut_ports[0])
    assert folding.columns is not None
    plan = ColumnarPlan.compile(split.prefix, "in", [e.ast for e in folding.reads])
    assert plan is not None
    ingest = [1_000 + i // run for i in range(len(events))]
    traced = plan.run(
        PipelineExecutor(split.prefix), pa.array([orjson.dumps(e) for e in events]), None, ingest
    )
    assert traced.columnar_rows == len(events)
    # Segments of one step each, as the fold event by event makes them (later steps: `test_partial`).
    folded = replace(folding.columns, steps=False).fold(
        traced, split.cut_ports[0], pa.array(ingest, pa.int64())
    )
    assert folded is not None
    want_rows, want_partials = folding.collapse_items(with_items(traced), ingest)
    rows, partials = folded
    assert (rows.ports, rows.values, rows.metas, rows.sources) == (
        want_rows.ports,
        want_rows.values,
        want_rows.metas,
        want_rows.sources,
    )
    assert partials.to_pylist() == want_partials.to_pylist()
