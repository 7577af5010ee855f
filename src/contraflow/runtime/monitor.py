"""Watching a flow's channels: depth, back-pressure with hysteresis, credit, and the delivered frontier.

Every tick (100 ms by default) the monitor reads, for each channel topic, how
far each reader got (sinks: their committed offset; pipelines: the end offset
of their last finished micro-batch) and then the topic's end offset:

- depth = end - slowest reader; bytes are estimated from the topic's mean
  record size. At the high watermark (events or bytes) the channel's producer
  stops: a source's gate closes, a pipeline gets zero credit; it resumes below
  the low watermark. Otherwise a pipeline's credit is the smallest room left
  in its output channels. Each transition is one runtime event
  (`backpressure`: flow, channel, on/off, depth, duration of the previous
  state, see `runtime.event_stream`) and a metric.
- delivered frontier of a channel = the smallest of its readers' frontiers:
  a sink's committed offset, or, through a pipeline, the input end of the
  newest micro-batch whose outputs (and those of every earlier batch) are
  below their own delivered frontiers. A batch's inputs come from the Spark
  listener, its outputs from the SPU batch ledger (`runtime.lineage`).
  Acknowledging sources are acked up to it.
- an aliased pipeline (`runtime.aliases`) has no batches: its readers read
  its input channel, so the frontier above holds for them as for any reader;
  its in/out counters grow by what the slowest of them read (every event it
  carries reaches each of them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from contraflow import control
from contraflow.pipeline.spark.listener import BatchProgress
from contraflow.pipeline.spark.run import PipelineRun
from contraflow.runtime.aliases import AliasPlan
from contraflow.runtime.event_stream import EventStream
from contraflow.runtime.lineage import BatchLineage, PipelineLineage, ledger_ends
from contraflow.runtime.metrics import RuntimeMetrics, Transition
from contraflow.runtime.priority import admitted
from contraflow.runtime.settings import FlowSettings
from contraflow.runtime.topology import Channel, Topology
from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.protocol.errors import ErrorCode, SpuError

TICK_S = 0.1
RATE_WINDOW_S = 1.0  # a channel's append rate is measured over about this long


@dataclass
class ChannelState:
    """What the monitor last saw of one channel."""

    end: int = 0
    depth: int = 0
    depth_bytes: int = 0
    mean_record_bytes: int = 0
    stopped: bool = False
    since: float = field(default_factory=time.monotonic)
    transitions: int = 0
    events_per_s: float = 0.0
    _rate_from: tuple[float, int] | None = None  # (when, end) the current rate window started

    def observe_end(self, end: int, now: float) -> None:
        """A new end offset: the append rate is recomputed once its window is full."""
        self.end = end
        if self._rate_from is None:
            self._rate_from = (now, end)
            return
        began, first = self._rate_from
        if now - began >= RATE_WINDOW_S:
            self.events_per_s = (end - first) / (now - began)
            self._rate_from = (now, end)


@dataclass(eq=False)  # an instance is a running thing: identity, not value, equality
class FlowMonitor:
    """The periodic task behind back-pressure, credits and acks of one flow instance."""

    flow_id: str
    topology: Topology
    settings: FlowSettings
    client: AsyncSpuClient
    pipelines: dict[str, PipelineRun]
    on_source_backpressure: Callable[[str, str, bool, str], None]
    metrics: RuntimeMetrics
    events: EventStream
    aliases: AliasPlan | None = None
    # aliased pipeline -> the events it carried as of the last tick (seeded from before this run)
    carried: dict[str, int] = field(default_factory=dict)
    states: dict[str, ChannelState] = field(init=False)
    reader_offsets: dict[tuple[str, str], int] = field(init=False, default_factory=dict)  # (topic, consumer)
    # Holding sinks' readers: how far the sink was handed events. Their depth (back-pressure) counts
    # what the sink took, or an object waiting for its next part would stall the flow; the delivered
    # frontier (acks, drain) still waits for their commits.
    handed_over: dict[tuple[str, str], Callable[[], int]] = field(init=False, default_factory=dict)
    delivered: dict[str, int] = field(init=False, default_factory=dict)
    lineage: dict[str, PipelineLineage] = field(init=False)
    # pipeline alias -> (when its last micro-batch finished, how long it took): for the watchdog
    last_batch: dict[str, tuple[float, float]] = field(init=False)

    def __post_init__(self) -> None:
        self.states = {t: ChannelState() for t in self.topology.channels}
        self.lineage = {alias: PipelineLineage() for alias in self.pipelines}
        self.last_batch = {alias: (time.monotonic(), 0.0) for alias in self.pipelines}
        self._unresolved: dict[str, list[BatchProgress]] = {alias: [] for alias in self.pipelines}
        self._seeded: set[str] = set()
        self._credits: dict[str, int | None] = {}

    async def tick(self) -> None:
        """One observation and everything that follows from it."""
        await self._observe()
        self._count_aliased()
        self._update_backpressure()
        await self._publish_credits()
        self._update_delivered()

    # -- observation ---------------------------------------------------------------------------

    async def _observe(self) -> None:
        for alias, run in self.pipelines.items():
            await self._follow_batches(alias, run)
        for topic, channel in self.topology.channels.items():
            for reader in channel.readers:
                committed = await self.client.fetch_offset(reader.consumer, topic, 0) or 0
                if reader.to.kind == "pipeline":
                    committed = max(committed, self.lineage[reader.to.alias].consumed(topic))
                previous = self.reader_offsets.get((topic, reader.consumer), 0)
                self.reader_offsets[(topic, reader.consumer)] = max(previous, committed)
        for topic in self.topology.channels:
            described = await self.client.describe_topic(topic)
            part = described.partitions[0]
            state = self.states[topic]
            state.observe_end(part.high_watermark, time.monotonic())
            records = part.log_end_offset - part.log_start_offset
            state.mean_record_bytes = part.size_bytes // records if records else 0
            name = self.topology.channels[topic].name
            self.metrics.set_channel_corrupt_batches(self.flow_id, name, part.corrupt_batches)
        for topic, channel in self.topology.channels.items():
            state = self.states[topic]
            slowest = min((self._read_up_to(topic, r.consumer) for r in channel.readers), default=state.end)
            state.depth = max(0, state.end - slowest)
            state.depth_bytes = state.depth * state.mean_record_bytes
            self.metrics.set_channel_depth(self.flow_id, channel.name, state.depth)

    def _read_up_to(self, topic: str, consumer: str) -> int:
        committed = self.reader_offsets[(topic, consumer)]
        handed_over = self.handed_over.get((topic, consumer))
        return committed if handed_over is None else max(committed, handed_over())

    # -- lineage -------------------------------------------------------------------------------

    async def _follow_batches(self, alias: str, run: PipelineRun) -> None:
        """Turn the pipeline's finished batches into lineage, in order (a failed ledger read
        leaves the rest for the next tick rather than losing or reordering them)."""
        lineage = self.lineage[alias]
        if alias not in self._seeded:  # what earlier runs of the query read, before the listener heard
            lineage.add(await self._committed_lineage(alias, run))
            self._seeded.add(alias)
        unresolved = self._unresolved[alias]
        for batch in run.finished():
            self.last_batch[alias] = (time.monotonic(), batch.duration_s)
            self.metrics.pipeline_batch(
                self.flow_id,
                alias,
                batch.duration_s,
                batch.rows_in,
                max(batch.rows_out, 0),
                phases=batch.phases,
                events_shuffled=batch.rows_shuffled,
                late=batch.late,
            )
            unresolved.append(batch)
        while unresolved:
            lineage.add(await self._batch_lineage(alias, run, unresolved[0]))
            unresolved.pop(0)

    async def _batch_lineage(self, alias: str, run: PipelineRun, batch: BatchProgress) -> BatchLineage:
        consumed = run.consumed(batch)
        if consumed is None:
            return await self._committed_lineage(alias, run)
        try:
            outputs = [c.topic for c in self.topology.outputs_of("pipeline", alias).values()]
            ends = await self.client.ledger(batch.query_id, batch.batch_id, topics=outputs)
        except SpuError as err:
            if err.code != ErrorCode.STALE_TRANSACTION:
                raise
            # The ledger forgot so old a batch: its outputs are below the output channels' ends now.
            return BatchLineage(consumed, await self._output_ends(alias))
        # Spark reports a batch once its sink committed: no ledger entry means it wrote nothing.
        return BatchLineage(consumed, ledger_ends(ends))

    async def _committed_lineage(self, alias: str, run: PipelineRun) -> BatchLineage:
        """A conservative stand-in for batches the listener cannot describe: as consumed, what
        the query committed (on the SPU, or in its checkpoint before this run: those batches'
        sink commits came first); as outputs, the whole of its output channels as they are now."""
        consumed = {}
        for inp in run.inputs:
            committed = await self.client.fetch_offset(inp.consumer, inp.topic, 0) or 0
            consumed[inp.topic] = max(committed, run.resumed.get(inp.topic, 0))
        return BatchLineage(consumed, await self._output_ends(alias))

    async def _output_ends(self, alias: str) -> dict[str, int]:
        ends = {}
        for channel in self.topology.outputs_of("pipeline", alias).values():
            ends[channel.topic] = (
                (await self.client.describe_topic(channel.topic)).partitions[0].high_watermark
            )
        return ends

    def _count_aliased(self) -> None:
        """An aliased pipeline's in/out counters grow by what its readers read since the last tick."""
        if self.aliases is None:
            return
        for alias in self.aliases.pipelines:
            carried = self.aliases.carried(alias, self._read_up_to)
            before = self.carried.get(alias, carried)
            if carried > before:
                self.metrics.pipeline_carried(self.flow_id, alias, carried - before)
            self.carried[alias] = max(carried, before)

    def input_waiting(self, alias: str) -> bool:
        """Whether pipeline `alias` has unread events in any of its input channels."""
        return any(
            self.reader_offsets.get((channel.topic, reader.consumer), 0) < self.states[channel.topic].end
            for channel, reader in self.topology.inputs_of("pipeline", alias)
        )

    # -- back-pressure -------------------------------------------------------------------------

    def _update_backpressure(self) -> None:
        for topic, channel in self.topology.channels.items():
            state = self.states[topic]
            bounds = self.settings.channel(channel.name)
            if not state.stopped and bounds.full(state.depth, state.depth_bytes):
                self._transition(channel, state, True)
            elif state.stopped and bounds.drained(state.depth, state.depth_bytes):
                self._transition(channel, state, False)

    def _transition(self, channel: Channel, state: ChannelState, stop: bool) -> None:
        now = time.monotonic()
        lasted = now - state.since
        state.stopped, state.since = stop, now
        state.transitions += 1
        kind: Transition = "pause" if stop else "resume"
        self.events.emit(
            "backpressure",
            self.flow_id,
            channel=channel.name,
            state="on" if stop else "off",
            transition=kind,
            depth=state.depth,
            depth_bytes=state.depth_bytes,
            duration_s=round(lasted, 3),
        )
        self.metrics.backpressure_transition(self.flow_id, channel.name, kind)
        if channel.producer.kind == "connector":
            why = f"back-pressure: channel {channel.name} at {state.depth} events"
            self.on_source_backpressure(channel.producer.alias, channel.name, stop, why)

    async def _publish_credits(self) -> None:
        for alias, run in self.pipelines.items():
            outputs = [c for c in self.topology.outputs_of("pipeline", alias).values() if c.readers]
            credit: int | None = None
            for channel in outputs:
                state = self.states[channel.topic]
                room = (
                    0 if state.stopped else max(0, self.settings.channel(channel.name).capacity - state.depth)
                )
                credit = room if credit is None else min(credit, room)
            credit = admitted(self.settings.priority, credit)
            for inp in run.inputs:
                value = control.credit(inp.consumer, inp.topic)
                if self._credits.get(value.name, -1) != credit:
                    await value.set_async(self.client, credit)
                    self._credits[value.name] = credit

    # -- delivered frontier --------------------------------------------------------------------

    def _update_delivered(self) -> None:
        memo: dict[str, int] = {}
        for topic in self.topology.channels:
            self.delivered[topic] = self._frontier(topic, memo, set())

    def _frontier(self, topic: str, memo: dict[str, int], visiting: set[str]) -> int:
        if topic in memo:
            return memo[topic]
        channel = self.topology.channels[topic]
        if topic in visiting:  # a cycle through pipelines: only what was read counts
            return 0
        visiting.add(topic)
        values = []
        for reader in channel.readers:
            offset = self.reader_offsets.get((topic, reader.consumer), 0)
            if reader.to.kind == "connector":
                values.append(offset)
            else:
                values.append(self._through_pipeline(reader.to.alias, topic, memo, visiting))
        visiting.discard(topic)
        memo[topic] = min(values, default=self.states[topic].end)
        return memo[topic]

    def _through_pipeline(self, alias: str, topic: str, memo: dict[str, int], visiting: set[str]) -> int:
        lineage = self.lineage.get(alias)
        if lineage is None:  # a pipeline without a query (nothing connected to its inputs)
            return 0
        lineage.advance(lambda out: self._frontier(out, memo, visiting))
        return lineage.frontier(topic)

    # -- drain ---------------------------------------------------------------------------------

    def drained(self) -> bool:
        """Every channel fully read by every reader and every pipeline's outputs delivered."""
        return all(s.depth == 0 for s in self.states.values()) and all(
            self.delivered.get(t, 0) >= s.end for t, s in self.states.items()
        )
