"""Routing-only pipelines as aliases: whoever reads such a pipeline's output reads its input channel.

A pipeline whose every output carries one input's events unchanged and in
order (`analysis.output_sources`: `select event`, `passthrough`, streams, no
merge of inputs) would only copy records from one topic to another. Its
output channel is instead an alias of the input channel: the sinks and
pipelines connected to the output become readers of the input channel's
topic under their own consumer names, and the pipeline runs nothing (no
query, no second write). Everything the runtime does per channel then holds
for them as for any reader: they resume from their committed offsets, the
delivered frontier (acks) waits for their commits, back-pressure counts their
depth and holds the source, a flow's pause holds them.

`plan_aliases` turns the flow's channels as written (`Topology.of`, what
status pages show) into the channels that run. A pipeline is left a query
when aliasing would change what a reader sees: an input port fed by several
channels (a merge), a reader already reading the input channel on the same
port (it would get each event once instead of twice), a cycle.

A pipeline keeps the way it first ran, because its readers' offsets belong to
the topic they read: one whose query ever planned a batch stays a query (its
checkpoint names where it resumes, its readers' offsets are on its output
topic); one that ran aliased leaves a mark beside the checkpoints
(`mark_aliased`) and stays aliased even if `route_in_log` is 0 later.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from contraflow.atomic_files import write_atomic
from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.analysis import output_sources
from contraflow.runtime.topology import Channel, Reader, Topology
from contraflow.spark.checkpoint import checkpoint_path
from contraflow.spu.client import AsyncSpuClient


@dataclass
class AliasPlan:
    """The channels that run, and where the aliased channels' records are."""

    topology: Topology
    # pipeline alias -> the readers (topic they now read, consumer) that read its outputs
    pipelines: dict[str, list[tuple[str, Reader]]] = field(default_factory=dict)
    # pipeline alias -> its input channel topics (what enters it)
    inputs: dict[str, list[str]] = field(default_factory=dict)
    _sources: dict[str, dict[str, str]] = field(default_factory=dict)  # pipeline -> output port -> input port
    _merged: dict[str, str] = field(default_factory=dict)  # aliased output topic -> topic it reads

    def carried(self, alias: str, read_up_to: Callable[[str, str], int]) -> int:
        """How many events pipeline `alias` carried so far: per topic its readers read, the slowest
        one's offset (`read_up_to(topic, consumer)`); outputs nobody reads carry nothing."""
        slowest: dict[str, int] = {}
        for topic, reader in self.pipelines[alias]:
            offset = read_up_to(topic, reader.consumer)
            slowest[topic] = min(offset, slowest.get(topic, offset))
        return sum(slowest.values())

    async def carried_before(self, client: AsyncSpuClient) -> dict[str, int]:
        """Each aliased pipeline's `carried` from its readers' committed offsets: what earlier runs
        delivered, read before this run's readers start (its counters count this run's events)."""
        committed = {
            (topic, reader.consumer): await client.fetch_offset(reader.consumer, topic, 0) or 0
            for readers in self.pipelines.values()
            for topic, reader in readers
        }
        return {alias: self.carried(alias, lambda t, c: committed[(t, c)]) for alias in self.pipelines}

    def topic_of(self, topic: str) -> str:
        """The topic that holds the records of channel `topic` (itself unless it is an alias)."""
        while topic in self._merged:
            topic = self._merged[topic]
        return topic


def plan_aliases(
    layout: Topology, pipelines: Mapping[str, PipelineGraph], keeps_query: Callable[[str], bool]
) -> AliasPlan:
    """Alias the outputs of every routing-only pipeline that `keeps_query` does not keep a query."""
    plan = AliasPlan(copy.deepcopy(layout))
    for alias, graph in pipelines.items():
        sources = output_sources(graph)
        if sources is None or keeps_query(alias):
            continue
        trial = copy.deepcopy(plan.topology)
        merged = _alias_outputs(trial, alias, sources)
        if merged is None:
            continue
        plan.topology = trial
        plan._merged.update(merged)
        plan._sources[alias] = sources
        plan.inputs[alias] = [c.topic for c, _ in layout.inputs_of("pipeline", alias)]
    for alias in plan.inputs:
        plan.pipelines[alias] = _readers_of(layout, plan, alias)
    return plan


def _readers_of(
    layout: Topology, plan: AliasPlan, alias: str, from_port: str | None = None
) -> list[tuple[str, Reader]]:
    """The readers that get `alias`'s outputs (those carrying input `from_port`, or all), each with
    the topic it reads now; through a chain of aliased pipelines, the readers at its end."""
    found = []
    for port, channel in layout.outputs_of("pipeline", alias).items():
        if from_port is not None and plan._sources[alias].get(port) != from_port:
            continue
        for reader in channel.readers:
            if reader.to.kind == "pipeline" and reader.to.alias in plan.inputs:
                found.extend(_readers_of(layout, plan, reader.to.alias, reader.to.port))
            else:
                found.append((plan.topic_of(channel.topic), reader))
    return found


def _alias_outputs(topo: Topology, alias: str, sources: dict[str, str]) -> dict[str, str] | None:
    """Move the readers of each output of `alias` onto the channel of the input it carries, in
    `topo`; the aliased output topics -> the topics they read, or None if `alias` must stay a query."""
    feeding: dict[str, list[Channel]] = {}
    for channel, reader in topo.inputs_of("pipeline", alias):
        feeding.setdefault(reader.to.port, []).append(channel)
    if not feeding or any(len(channels) != 1 for channels in feeding.values()):
        return None  # not started, or an input port merging several channels
    outputs = topo.outputs_of("pipeline", alias)
    merged: dict[str, str] = {}
    for channels in feeding.values():
        channel = channels[0]
        channel.readers = [
            r for r in channel.readers if not (r.to.kind == "pipeline" and r.to.alias == alias)
        ]
    for out_port, in_port in sources.items():
        output = outputs.get(out_port)
        if output is None:
            continue  # an output nobody reads
        if in_port not in feeding:
            return None  # readers of an output whose input is not connected: leave it as it runs
        target = feeding[in_port][0]
        if target.producer.kind == "pipeline" and target.producer.alias == alias:
            return None  # the pipeline feeds itself: its output is no one input's stream
        if any(r.to == moved.to for r in target.readers for moved in output.readers):
            return None
        target.readers.extend(output.readers)
        del topo.channels[output.topic]
        merged[output.topic] = target.topic
    return merged


def _mark(data_dir: Path, flow_id: str, alias: str) -> Path:
    checkpoint = checkpoint_path(data_dir, flow_id, alias)
    return checkpoint.with_name(checkpoint.name + ".aliased")


def ran_aliased(data_dir: Path, flow_id: str, alias: str) -> bool:
    """Whether pipeline `alias` of the flow ran aliased before (its readers' offsets are on its inputs)."""
    return _mark(data_dir, flow_id, alias).exists()


def ran_as_query(data_dir: Path, flow_id: str, alias: str) -> bool:
    """Whether a Spark query of pipeline `alias` ever planned a batch (its offset log is not empty)."""
    offsets = checkpoint_path(data_dir, flow_id, alias) / "offsets"
    return offsets.is_dir() and any(offsets.iterdir())


def mark_aliased(data_dir: Path, flow_id: str, alias: str) -> None:
    """Remember, durably and before any reader commits an offset on the inputs, that `alias` runs aliased."""
    mark = _mark(data_dir, flow_id, alias)
    if not mark.exists():
        mark.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(mark, b"")
