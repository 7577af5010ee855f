"""Whether a runtime pipeline's query runs with timers, kept for the life of its checkpoint.

Spark refuses to resume a `transformWithState` checkpoint in another time
mode ("Cannot change timeMode from ProcessingTime to NoTime"). The rule that
picks the mode (`analysis.has_timers`) once counted every interval window the
watermark does not close, scripted ones too, which ticks never move; it now
counts only what ticks move. So the mode is chosen once per checkpoint and
written beside it (`<checkpoint>.time_mode`, like the runtime's `.aliased`
marks): a new checkpoint takes today's rule, one that planned a batch before
marks existed takes the rule it was created under.
"""

from __future__ import annotations

from pathlib import Path

from contraflow.atomic_files import write_atomic
from contraflow.lang.graph import Node, PipelineGraph, SelectSpec
from contraflow.pipeline.analysis import any_node, has_timers

PROCESSING_TIME = "ProcessingTime"
NO_TIME = "None"


def query_has_timers(checkpoint: Path, graph: PipelineGraph) -> bool:
    """The time mode of the query at `checkpoint` (True: processing-time timers), marked on first use."""
    mark = checkpoint.with_name(checkpoint.name + ".time_mode")
    if mark.exists():
        return mark.read_text().strip() == PROCESSING_TIME
    timers = _had_timers_unmarked(graph) if _planned(checkpoint) else has_timers(graph)
    mark.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(mark, (PROCESSING_TIME if timers else NO_TIME).encode())
    return timers


def _planned(checkpoint: Path) -> bool:
    """Whether a query planned a batch at `checkpoint` (its state store may have fixed the mode)."""
    offsets = checkpoint / "offsets"
    return offsets.is_dir() and any(offsets.iterdir())


def _had_timers_unmarked(graph: PipelineGraph) -> bool:
    """The rule of checkpoints made before the mark: any timed node, or any interval window the
    watermark does not close (scripted or not)."""
    return has_timers(graph) or any_node(graph, _unwatermarked_interval)


def _unwatermarked_interval(node: Node) -> bool:
    spec = node.spec
    return isinstance(spec, SelectSpec) and any(w.interval_ns and not w.watermarked for w in spec.windows)
