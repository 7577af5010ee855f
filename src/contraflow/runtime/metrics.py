"""The runtime's Prometheus metric families, named in one place.

The runtime owns one `RuntimeMetrics` (with its own `CollectorRegistry`, so
two runtimes in one process, or tests, never share counters) and calls its
methods from connectors, channel monitors and the Spark listener; the API
renders `metrics.registry` at `GET /metrics`.

Families (labels in braces):

- `contraflow_connector_events_total{flow,connector,port}`: events through a connector port
- `contraflow_connector_bytes_total{flow,connector,port}`: payload bytes through a connector port
- `contraflow_connector_errors_total{flow,connector,port}`: events a connector failed (codec, delivery)
- `contraflow_channel_depth{flow,channel}`: events in a channel not yet consumed by its slowest reader
- `contraflow_channel_corrupt_batches{flow,channel}`: distinct corrupt batches (CRC32C, framing)
  reads met in the channel's topic since the SPU opened it
- `contraflow_channel_breaker_open{flow,channel}`: 1 while the channel's circuit breaker is open, else 0
- `contraflow_channel_backpressure_transitions_total{flow,channel,transition}`: `pause` at the high
  watermark, `resume` below the low one
- `contraflow_pipeline_batch_duration_seconds{flow,pipeline}`: histogram of micro-batch durations
- `contraflow_pipeline_batch_phase_seconds_total{flow,pipeline,phase}`: where micro-batches' time
  went, from Spark's progress: `offsets`, `planning`, `execution`, `commit`, and `state_commit`
  (state stores, summed over tasks) for stateful pipelines
- `contraflow_pipeline_events_total{flow,pipeline,direction}`: `in`/`out` events of a pipeline;
  `shuffled`: events (segment heads and ordinary ones) carried into a stateful pipeline's
  `transformWithState`, which partial aggregation keeps below `in`
- `contraflow_pipeline_late_events_total{flow,pipeline,node}`: events a pipeline's node (a select
  whose window the watermark closes, or a join; see docs/languages.md) called late and sent to `err`
- `contraflow_pipeline_events_per_second{flow,pipeline}`: input rate of the last micro-batch
- `contraflow_stage_seconds_total{flow,stage}`: wall time the runtime spent in one stage of a flow's
  hot path (`source_read`, `source_decode`, `append`, `sink_write`, `sink_commit`, `monitor`),
  measured once per pull, fetch or tick, so dividing by events gives where each event's time goes
- `contraflow_watchdog_warnings_total{flow,node,what}`: watchdog reports (`batch`, `send`, `pull`;
  `loop` with empty flow and node for the event loop)
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar, cast

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

# Micro-batches take from a few milliseconds (tiny local batches) to minutes (cluster backlogs).
BATCH_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

Transition = Literal["pause", "resume"]
Stage = Literal["source_read", "source_decode", "append", "sink_write", "sink_commit", "monitor"]

M = TypeVar("M", bound=MetricWrapperBase)


class RuntimeMetrics:
    """Typed recording methods over the metric families, and cleanup when a flow goes away."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        conn = ["flow", "connector", "port"]
        chan = ["flow", "channel"]
        pipe = ["flow", "pipeline"]
        self.connector_events_total = Counter(
            "contraflow_connector_events", "Events through a connector port.", conn, registry=r
        )
        self.connector_bytes_total = Counter(
            "contraflow_connector_bytes", "Payload bytes through a connector port.", conn, registry=r
        )
        self.connector_errors_total = Counter(
            "contraflow_connector_errors",
            "Events a connector port failed to decode or deliver.",
            conn,
            registry=r,
        )
        self.channel_depth = Gauge(
            "contraflow_channel_depth",
            "Events in a channel not yet consumed by its slowest reader.",
            chan,
            registry=r,
        )
        self.channel_corrupt_batches = Gauge(
            "contraflow_channel_corrupt_batches",
            "Distinct corrupt batches (CRC32C, framing) reads met in the channel's topic since the SPU opened it.",
            chan,
            registry=r,
        )
        self.channel_breaker_open = Gauge(
            "contraflow_channel_breaker_open",
            "1 while the channel's circuit breaker is open, else 0.",
            chan,
            registry=r,
        )
        self.channel_backpressure_transitions_total = Counter(
            "contraflow_channel_backpressure_transitions",
            "Back-pressure transitions: pause at the high watermark, resume below the low one.",
            [*chan, "transition"],
            registry=r,
        )
        self.pipeline_batch_duration_seconds = Histogram(
            "contraflow_pipeline_batch_duration_seconds",
            "Duration of a pipeline's micro-batches.",
            pipe,
            buckets=BATCH_DURATION_BUCKETS,
            registry=r,
        )
        self.pipeline_batch_phase_seconds_total = Counter(
            "contraflow_pipeline_batch_phase_seconds",
            "Time a pipeline's micro-batches spent in each phase, from Spark's progress.",
            [*pipe, "phase"],
            registry=r,
        )
        self.pipeline_events_total = Counter(
            "contraflow_pipeline_events",
            "Events into (in) and out of (out) a pipeline.",
            [*pipe, "direction"],
            registry=r,
        )
        self.pipeline_late_events_total = Counter(
            "contraflow_pipeline_late_events",
            "Events a pipeline's node called late (behind its watermark) and sent to err.",
            [*pipe, "node"],
            registry=r,
        )
        self.pipeline_events_per_second = Gauge(
            "contraflow_pipeline_events_per_second",
            "Input rate of a pipeline's last micro-batch.",
            pipe,
            registry=r,
        )
        self.stage_seconds_total = Counter(
            "contraflow_stage_seconds",
            "Wall time spent in one stage of a flow's hot path (per pull, fetch or monitor tick).",
            ["flow", "stage"],
            registry=r,
        )
        self.watchdog_warnings_total = Counter(
            "contraflow_watchdog_warnings",
            "Watchdog reports: a micro-batch, send or pull past its deadline, or a blocked event loop.",
            ["flow", "node", "what"],
            registry=r,
        )
        # Children by (family, labels): `family.labels()` costs several microseconds, and sources
        # count every event. Keys are grouped per flow so `forget_flow` can drop a flow's series.
        self._children: dict[tuple[MetricWrapperBase, tuple[str, ...]], Any] = {}
        self._series: dict[str, set[tuple[MetricWrapperBase, tuple[str, ...]]]] = defaultdict(set)
        self._port_children: dict[tuple[str, str, str], tuple[Counter, Counter]] = {}

    def _child(self, family: M, *labels: str) -> M:
        key = (family, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*labels)
            self._series[labels[0]].add(key)
        return cast(M, child)

    def connector_events(
        self, flow: str, connector: str, port: str, events: int = 1, nbytes: int = 0
    ) -> None:
        """Count `events` events of `nbytes` payload bytes through a connector port (per-event hot path)."""
        key = (flow, connector, port)
        pair = self._port_children.get(key)
        if pair is None:
            pair = self._port_children[key] = (
                self._child(self.connector_events_total, *key),
                self._child(self.connector_bytes_total, *key),
            )
        pair[0].inc(events)
        pair[1].inc(nbytes)

    def connector_errors(self, flow: str, connector: str, port: str, errors: int = 1) -> None:
        """Count events a connector port failed (they go to its `err` port)."""
        self._child(self.connector_errors_total, flow, connector, port).inc(errors)

    def set_channel_depth(self, flow: str, channel: str, depth: int) -> None:
        """Record a channel's current depth (end offset minus the slowest committed offset)."""
        self._child(self.channel_depth, flow, channel).set(depth)

    def set_channel_corrupt_batches(self, flow: str, channel: str, count: int) -> None:
        """Record how many distinct corrupt batches the SPU met reading a channel's topic."""
        self._child(self.channel_corrupt_batches, flow, channel).set(count)

    def set_breaker(self, flow: str, channel: str, is_open: bool) -> None:
        """Record whether a channel's circuit breaker is open."""
        self._child(self.channel_breaker_open, flow, channel).set(1 if is_open else 0)

    def backpressure_transition(self, flow: str, channel: str, transition: Transition) -> None:
        """Count one back-pressure transition of a channel."""
        if transition not in ("pause", "resume"):
            raise ValueError(f"transition must be 'pause' or 'resume', not {transition!r}")
        family = self.channel_backpressure_transitions_total
        self._child(family, flow, channel, transition).inc()

    def pipeline_batch(
        self,
        flow: str,
        pipeline: str,
        duration_s: float,
        events_in: int,
        events_out: int,
        events_per_second: float | None = None,
        phases: tuple[tuple[str, float], ...] = (),
        events_shuffled: int = 0,
        late: tuple[tuple[str, int], ...] = (),
    ) -> None:
        """Record one finished micro-batch; the rate defaults to `events_in / duration_s`."""
        self._child(self.pipeline_batch_duration_seconds, flow, pipeline).observe(duration_s)
        for phase, seconds in phases:
            self._child(self.pipeline_batch_phase_seconds_total, flow, pipeline, phase).inc(seconds)
        self._child(self.pipeline_events_total, flow, pipeline, "in").inc(events_in)
        self._child(self.pipeline_events_total, flow, pipeline, "out").inc(events_out)
        if events_shuffled:
            self._child(self.pipeline_events_total, flow, pipeline, "shuffled").inc(events_shuffled)
        for node, count in late:
            self._child(self.pipeline_late_events_total, flow, pipeline, node).inc(count)
        if events_per_second is None:
            events_per_second = events_in / duration_s if duration_s > 0 else 0.0
        self._child(self.pipeline_events_per_second, flow, pipeline).set(events_per_second)

    def pipeline_carried(self, flow: str, pipeline: str, events: int) -> None:
        """Events an aliased pipeline carried to its readers (`runtime.aliases`): in and out alike."""
        self._child(self.pipeline_events_total, flow, pipeline, "in").inc(events)
        self._child(self.pipeline_events_total, flow, pipeline, "out").inc(events)

    @contextmanager
    def timed(self, flow: str, stage: Stage) -> Iterator[None]:
        """Add the time the block takes to the flow's `stage` (once per batch, never per event)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self._child(self.stage_seconds_total, flow, stage).inc(time.perf_counter() - started)

    def watchdog_warning(self, flow: str, node: str, what: str) -> None:
        """Count one watchdog report (`what`: batch, send, pull or loop)."""
        self._child(self.watchdog_warnings_total, flow, node, what).inc()

    def forget_flow(self, flow: str) -> None:
        """Drop every series of an undeployed flow, so `/metrics` shows only live flows."""
        for port_key in [k for k in self._port_children if k[0] == flow]:
            del self._port_children[port_key]
        for key in self._series.pop(flow, set()):
            family, labels = key
            self._children.pop(key, None)
            family.remove(*labels)
