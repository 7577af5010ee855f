"""Keying a stateful pipeline by its `group by`, where that is sound.

By default a stateful pipeline is one ordered stream (one `transformWithState`
key), as in Tremor. When what needs state is a single windowed select with
`group by <expr>`, each group's windows see only that group's events, and
nothing else in the stateful part is shared: such a pipeline may run as
several independent streams, each holding a fixed share of the groups. The
events of a group then keep their order, windows close on the same events
and ticks, and only the interleaving of different groups' outputs differs.

Not sound, and so not done, with `max_groups` (a limit over all groups),
`group by set/each` (one event in several groups) or any other stateful node.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from contraflow.events import decode_value
from contraflow.lang.graph import PipelineGraph, SelectSpec
from contraflow.lang.script.compiler import compile_expr
from contraflow.pipeline.grouping import group_key

# Independent streams of a group-keyed pipeline. Fixed: it is part of the state's layout
# (each stream's state is stored under its number), so changing it needs a fresh checkpoint.
GROUP_STREAMS = 16


def independent_groups(graph: PipelineGraph) -> str | None:
    """The select node whose groups are independent streams of `graph`, or None."""
    nodes = [node for node in graph.nodes.values() if node.kind not in ("input", "output")]
    if len(nodes) != 1:
        return None
    node = nodes[0]
    spec = node.spec
    if not isinstance(spec, SelectSpec) or not spec.windows:
        return None
    if spec.group_by is None or spec.group_by.mode != "expr":
        return None
    if any(window.max_groups is not None for window in spec.windows):
        return None
    return node.name


@dataclass(frozen=True)
class GroupStreams:
    """Which independent stream an event belongs to: its group's number modulo GROUP_STREAMS."""

    graph: PipelineGraph
    select: str

    @cached_property
    def _group_of(self) -> Any:
        spec = self.graph.nodes[self.select].spec
        assert isinstance(spec, SelectSpec) and spec.group_by is not None and spec.group_by.expr is not None
        compiled = compile_expr(
            spec.group_by.expr.ast, name=self.select, consts=self.graph.constants, fns=self.graph.functions
        )
        return compiled.fn

    def stream(self, value: bytes, meta: dict[str, Any] | None) -> str:
        """The stream key of an event (channel bytes); events the select cannot group go to stream 0
        (the select turns them into error events there)."""
        try:
            group = self._group_of(decode_value(value), meta or {}, None, self.graph.args, None, None)
            key = group_key([group])
        except Exception:  # noqa: BLE001 - the select reports it, in its stream
            return "0"
        data = key.encode() if isinstance(key, str) else key
        return str(zlib.crc32(data) % GROUP_STREAMS)
