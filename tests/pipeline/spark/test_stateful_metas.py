"""Metadata decoding in the stateful stage: shared dicts only where no node can change them."""

from __future__ import annotations

from typing import Any

import orjson

from contraflow.pipeline.spark.plan import PipelinePlan
from contraflow.pipeline.spark.stateful import PipelineProcessor, _decode_metas

WINDOWED = """
define window w from tumbling with size = 2 end;
select {"k": group[0], "n": aggr::stats::count()} from in[w] group by $k into out;
"""
SCRIPTED = """
define script tag
script
  let $seen = true;
  event
end;
create script tag;
select event from in into tag;
select event from tag into out;
"""


def _processor(graph: Any) -> PipelineProcessor:
    plan = PipelinePlan(graph, "f", "p", {"in": "t"}, {"out": "o"})
    return PipelineProcessor(plan, sorted(plan.new_executor().snapshot()))


def test_only_a_graph_of_selects_shares_metadata(query) -> None:
    assert _processor(query(WINDOWED))._metas_read_only is True
    assert _processor(query(SCRIPTED))._metas_read_only is False


def test_shared_decoding_gives_one_dict_per_distinct_value_and_the_same_values() -> None:
    raw = [orjson.dumps({"k": "a"}), None, orjson.dumps({"k": "b"}), orjson.dumps({"k": "a"}), b""]
    shared = _decode_metas(raw, share=True)
    fresh = _decode_metas(raw, share=False)
    assert shared == fresh == [{"k": "a"}, None, {"k": "b"}, {"k": "a"}, None]
    assert shared[0] is shared[3] and shared[0] is not shared[2]
    assert fresh[0] is not fresh[3]


def test_a_windowed_select_counts_the_same_with_shared_metadata(query) -> None:
    graph = query(WINDOWED)
    values = [orjson.dumps(i) for i in range(6)]
    raw = [orjson.dumps({"k": "a" if i % 3 else "b"}) for i in range(6)]
    outputs = []
    for share in (True, False):
        executor = PipelinePlan(graph, "f", "p", {"in": "t"}, {"out": "o"}).new_executor()
        columns = executor.process_values("in", values, _decode_metas(raw, share), list(range(6)))
        outputs.append([orjson.loads(v) for v in columns["out"][0]])
    assert outputs[0] == outputs[1] == [{"k": "a", "n": 2}, {"k": "b", "n": 2}, {"k": "a", "n": 2}]
