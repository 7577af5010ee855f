"""Keying a stateful pipeline by its `group by`, where that is sound.

By default a stateful pipeline is one ordered stream (one `transformWithState`
key), as in Tremor. When what needs state is a single windowed select with
`group by <expr>`, each group's windows see only that group's events, and
nothing else in the stateful part is shared: such a pipeline may run as
several independent streams, each holding a fixed share of the groups. The
events of a group then keep their order, windows close on the same events
and ticks, and only the interleaving of different groups' outputs differs.

Not sound, and so not done, with `max_groups` (a limit over all groups), windows closed by the
watermark (one watermark over all groups, see `pipeline.event_time`),
`group by set/each` (one event in several groups) or any other stateful node.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from contraflow.lang.graph import PipelineGraph, SelectSpec
from contraflow.lang.script.compiler import compile_expr
from contraflow.pipeline.grouping import group_key
from contraflow.pipeline.item import UNDECODED, Item, decode

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Independent streams of a group-keyed pipeline. Fixed: it is part of the state's layout
# (each stream's state is stored under its key, a spelling of its number: see `stream_keys`),
# so changing it needs a fresh checkpoint.
GROUP_STREAMS = 16
# How many spellings of a stream's number `stream_keys` tries per partition before giving up.
_SPELLINGS_PER_PARTITION = 32
# String group values whose stream `GroupStreams` remembers; past this many the memory starts afresh.
_REMEMBERED_GROUPS = 65_536


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
    if any(window.watermarked for window in spec.windows):  # one watermark over all groups
        return None
    return node.name


def stream_keys(spark: SparkSession, partitions: int) -> tuple[str, ...]:
    """The `transformWithState` key of each group stream, chosen so the streams spread evenly over
    the operator's `partitions` tasks.

    Spark sends a key to partition `pmod(hash(key), partitions)`; with plain
    numbers as keys, 16 streams over 2 tasks came out 11 and 5, and one core
    idled through a third of every batch. Stream `i` is keyed by the first of
    `"i"`, `"i.1"`, `"i.2"`, ... that Spark's own `hash` places in partition
    `i mod partitions` (asked of Spark itself, so it always matches the
    partitioner). The text before the dot is the stream number
    (`stream_number`), so state moves between instances with other
    partition counts.
    """
    from pyspark.sql import functions as F

    spellings = [
        (i, f"{i}.{j}" if j else str(i))
        for i in range(GROUP_STREAMS)
        for j in range(_SPELLINGS_PER_PARTITION * partitions)
    ]
    frame = spark.createDataFrame(spellings, "stream int, key string")
    placed = frame.select("stream", "key", F.expr(f"pmod(hash(key), {partitions})").alias("partition"))
    keys: dict[int, str] = {}
    for row in placed.collect():
        if row["stream"] not in keys and row["partition"] == row["stream"] % partitions:
            keys[row["stream"]] = row["key"]
    return tuple(keys.get(i, str(i)) for i in range(GROUP_STREAMS))


def stream_number(key: str) -> int:
    """The stream a `stream_keys` key stands for."""
    return int(key.split(".", 1)[0])


@dataclass(frozen=True)
class GroupStreams:
    """Which independent stream an event belongs to: its group's number modulo GROUP_STREAMS.

    `keys` name the streams (see `stream_keys`); by default their numbers.
    """

    graph: PipelineGraph
    select: str
    keys: tuple[str, ...] = tuple(str(i) for i in range(GROUP_STREAMS))

    @property
    def first(self) -> str:
        """The stream of events that have no group (errors, outputs already final)."""
        return self.keys[0]

    @cached_property
    def _group_of(self) -> Any:
        spec = self.graph.nodes[self.select].spec
        assert isinstance(spec, SelectSpec) and spec.group_by is not None and spec.group_by.expr is not None
        compiled = compile_expr(
            spec.group_by.expr.ast, name=self.select, consts=self.graph.constants, fns=self.graph.functions
        )
        return compiled.fn

    def stream(self, value: bytes, meta: dict[str, Any] | None) -> str:
        """The stream key of an event (channel bytes); events the select cannot group go to the first
        stream (the select turns them into error events there)."""
        return self.stream_of_item([UNDECODED, meta, value])

    def stream_of_item(self, item: Item) -> str:
        """The stream key of an executor item (see `contraflow.pipeline.item`), parsed only if no node read it."""
        try:
            event = decode(item)
        except Exception:  # noqa: BLE001 - the select reports it, in its stream
            return self.first
        return self.stream_of(event, item[1])

    @cached_property
    def _remembered(self) -> dict[str, str]:
        """String group value -> its stream key: groups are few next to events, and hashing the
        same value again for every event was a tenth of a split pipeline's first stage."""
        return {}

    def stream_of(self, event: Any, meta: dict[str, Any] | None) -> str:
        """The stream key of a decoded event."""
        try:
            value = self._group_of(event, meta or {}, None, self.graph.args, None, None)
        except Exception:  # noqa: BLE001 - the select reports it, in its stream
            return self.first
        return self.stream_of_group(value)

    @property
    def group_expr(self) -> Any:
        """The select's `group by` expression (a tremor-script AST)."""
        spec = self.graph.nodes[self.select].spec
        assert isinstance(spec, SelectSpec) and spec.group_by is not None and spec.group_by.expr is not None
        return spec.group_by.expr.ast

    def stream_of_group(self, value: Any) -> str:
        """The stream key of a group value (what `group by` evaluated to)."""
        if type(value) is not str:
            return self._stream_of_key(group_key([value]))
        remembered = self._remembered
        stream = remembered.get(value)
        if stream is None:
            if len(remembered) >= _REMEMBERED_GROUPS:
                remembered.clear()
            stream = remembered[value] = self._stream_of_key(value)
        return stream

    def _stream_of_key(self, key: str | bytes) -> str:
        data = key.encode() if isinstance(key, str) else key
        return self.keys[zlib.crc32(data) % GROUP_STREAMS]
