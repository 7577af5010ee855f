"""Running a compiled pipeline as a Spark query between its own real SPU topics, for the Spark tests.

One `SparkPipeline` owns one topic per input port and per output port (named
with a prefix unique in the test run, since every test shares one SPU and one
Spark session) and a checkpoint directory; it feeds input topics, starts the
query with `start_pipeline`, and reads output topics back.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from contraflow.events import META_HEADER
from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.spark.query import start_pipeline
from contraflow.spu.api import read_topic
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol.topics import TopicConfig

_names = itertools.count()

# The pipeline-state RFC's example: a script counting every event in its node state.
RFC_COUNTER = """
define script counter
script
  let state = match type::is_null(state) of
    case true => 1
    default => state + 1
  end;
  {"count": state, "event": event}
end;
create script counter;
select event from in into counter;
select event from counter into out;
"""


def read_values(spu: SpuClient, topic: str) -> list[Any]:
    return [orjson.loads(r.value) for r in read_topic(spu, topic)]


def poll(read: Callable[[], list[Any]], done: Callable[[list[Any]], bool], timeout_s: float) -> list[Any]:
    """Read until `done` holds or the deadline passes; returns the last read (the caller asserts on it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = read()
        if done(found) or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


class SparkPipeline:
    """A pipeline graph with its own topics and checkpoint, run with `start_pipeline`."""

    def __init__(
        self,
        spark: Any,
        spu: SpuClient,
        addr: str,
        graph: PipelineGraph,
        workdir: Path,
        partitions: Mapping[str, int] | None = None,
    ) -> None:
        self.spark, self.spu, self.addr, self.graph = spark, spu, addr, graph
        self.prefix = f"ops{next(_names)}"
        self.inputs = {port: f"{self.prefix}.{port}" for port in graph.inputs}
        self.outputs = {port: f"{self.prefix}.{port}" for port in graph.outputs}
        for port, topic in self.inputs.items():
            spu.create_topic(topic, TopicConfig(partitions=(partitions or {}).get(port, 1)))
        for topic in self.outputs.values():
            spu.create_topic(topic)
        self.checkpoint = str(workdir / f"{self.prefix}-checkpoint")
        self.query: Any = None

    def start(self, **options: Any) -> SparkPipeline:
        self.query = start_pipeline(
            self.spark,
            self.graph,
            spu=self.addr,
            inputs=self.inputs,
            outputs=self.outputs,
            checkpoint=self.checkpoint,
            name=self.prefix,
            consumer=f"{self.prefix}.consumer",
            **options,
        )
        return self

    def feed(
        self, *events: Any, port: str = "in", partition: int = 0, meta: dict[str, Any] | None = None
    ) -> None:
        """Append events (JSON values, or bytes as they are) to input `port`'s topic in one produce;
        `meta` goes along as every event's metadata header."""
        values = [e if isinstance(e, bytes) else orjson.dumps(e) for e in events]
        headers = [[(META_HEADER, orjson.dumps(meta))]] * len(values) if meta else None
        self.spu.produce(self.inputs[port], partition, values, headers=headers)

    def drain(self) -> None:
        """Wait until the query has processed everything fed so far (and did not die)."""
        self.query.processAllAvailable()
        assert self.query.exception() is None

    def metas(self, port: str = "out") -> list[Any]:
        """The metadata header of each record on `port` (None where there is none)."""
        return [
            orjson.loads(dict(r.headers)[META_HEADER]) if dict(r.headers).get(META_HEADER) else None
            for r in read_topic(self.spu, self.outputs[port])
        ]

    def values(self, port: str = "out") -> list[Any]:
        return read_values(self.spu, self.outputs[port])

    def wait_for(self, count: int, port: str = "out", timeout_s: float = 60) -> list[Any]:
        """The values on `port` once at least `count` arrived (timer-driven output), or at the deadline."""
        return poll(lambda: self.values(port), lambda found: len(found) >= count, timeout_s)

    def stop(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()
