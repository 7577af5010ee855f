"""One deployed flow instance: its connectors as asyncio tasks, pipelines as Spark queries, channels as topics.

Lifecycle: `prepare()` checks everything that can be wrong before anything
runs (connector kinds and config, channel names and settings); `start()`
creates the channel topics, starts the pipeline queries, connects the sinks
and only then lets each source pull (controlled start: a source's gate is
held until every sink it reaches has connected). `pause()`/`resume()` hold
sources first, then sinks (resume reverses it). `quiesce()` stops the
sources, drains pipelines and sinks, commits, and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contraflow import control
from contraflow.api.facade import (
    ChannelStatus,
    ConnectorStatus,
    FlowStatus,
    InvalidTransition,
    NodeRef,
    PipelineEndpoint,
    State,
)
from contraflow.connectors.base import Connector, ConnectorContext, check_connector, connector_for
from contraflow.errors import UserError
from contraflow.lang.graph import FlowGraph
from contraflow.pipeline.python.modules import check_operators
from contraflow.pipeline.spark.run import PipelineInput, PipelineRun, start_pipeline_query, transient_failure
from contraflow.pipeline.spark.time_mode import query_has_timers
from contraflow.runtime.acks import AckTracker
from contraflow.runtime.aliases import mark_aliased, plan_aliases, ran_aliased, ran_as_query
from contraflow.runtime.cancellation import QueryStops, TieredCancel
from contraflow.runtime.connection import SharedConnect
from contraflow.runtime.event_stream import EventStream
from contraflow.runtime.gate import Gate
from contraflow.runtime.hold import Breaker, BreakerCause, HoldPolicy
from contraflow.runtime.metrics import RuntimeMetrics
from contraflow.runtime.monitor import TICK_S, FlowMonitor
from contraflow.runtime.priority import YieldBudget, admitted
from contraflow.runtime.qos_feed import QosFeed
from contraflow.runtime.routes import Routes
from contraflow.runtime.settings import FlowSettings
from contraflow.runtime.sink import NOT_CONNECTED, SinkRunner
from contraflow.runtime.source import SourceRunner
from contraflow.runtime.spark_on_demand import SparkOnDemand
from contraflow.runtime.topology import Channel, Endpoint, Topology
from contraflow.runtime.watchdog import FlowWatchdog
from contraflow.spark.checkpoint import checkpoint_path
from contraflow.spu.client import AsyncProducer, ProducerSettings
from contraflow.spu.client.in_process import spu_client
from contraflow.spu.protocol.errors import REROUTE, SpuError
from contraflow.spu.protocol.topics import TopicConfig

log = logging.getLogger("contraflow.runtime.flow")

STOP_GRACE_S = 0.5  # connector tasks told to stop get this long before they are cancelled
EARLIER_STOP_S = 60.0  # a redeploy waits this long for its pipelines' last runs to stop
CONNECT_WARNING_S = 60.0  # one terminal warning per connector and minute while it cannot connect
QUERY_RESTARTS = 3  # a pipeline's query is started again this often after a transient failure


@dataclass
class Services:
    """What every flow instance of a runtime shares."""

    spu_addr: str
    spark: SparkOnDemand  # awaited where a query starts: flows that run none never start Spark
    data_dir: Path
    metrics: RuntimeMetrics
    stop_runtime: Callable[[], None]
    events: EventStream = field(default_factory=lambda: EventStream(None))
    query_stops: QueryStops = field(default_factory=QueryStops)


@dataclass
class ConnectorInstance:
    """A connector of the flow with its gate and runners."""

    connector: Connector
    gate: Gate
    source: SourceRunner | None = None
    sink: SinkRunner | None = None
    paused: bool = False
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    connect: SharedConnect | None = None

    @property
    def ctx(self) -> ConnectorContext:
        return self.connector.ctx


class FlowInstance:
    """A running copy of a `FlowGraph` under its own id (its channel topics are its own)."""

    def __init__(self, flow_id: str, graph: FlowGraph, services: Services) -> None:
        self.id = flow_id
        self.graph = graph
        self.services = services
        self.layout = Topology.of(flow_id, graph)  # the channels as written: what status shows
        self.settings = FlowSettings.from_args(
            flow_id, graph.args, {c.name for c in self.layout.channels.values()}, set(graph.pipelines)
        )
        # The channels that run: routing-only pipelines' outputs read where their inputs are.
        self.aliases = plan_aliases(self.layout, graph.pipelines, self._keeps_query)
        self.topology = self.aliases.topology
        self.watchdog = FlowWatchdog(flow_id, self.settings.watchdog, services.events, services.metrics)
        self.state: State = "initializing"
        self.error: str | None = None
        self.connectors: dict[str, ConnectorInstance] = {}
        self.pipelines: dict[str, PipelineRun] = {}
        self.query_restarts: dict[str, int] = {}  # pipeline alias -> restarts after transient failures
        self.acks: dict[str, AckTracker] = {}
        self.client = spu_client(services.spu_addr)  # in process when the SPU runs in this one
        self.producer = AsyncProducer(
            self.client, ProducerSettings(linger_ms=self.settings.appends.linger_ms)
        )
        self.monitor: FlowMonitor | None = None
        self._monitor_task: asyncio.Task[None] | None = None
        self.routes = Routes(self.topology, graph.pipelines)
        self._gates: dict[str, Gate] = {}  # connector alias -> its gate (filled by `prepare`)
        self._sources: set[str] = set()  # aliases of the connectors that run as sources (by `start`)
        self.holds = HoldPolicy(self.routes, self._gates, self._sources)
        self.qos: QosFeed | None = None
        self.finished = asyncio.Event()
        self.started_at = time.monotonic()
        self._connect_warned: dict[str, float] = {}  # connector -> when its last connect warning went out

    # -- setup ---------------------------------------------------------------------------------

    def _keeps_query(self, alias: str) -> bool:
        """Whether routing-only pipeline `alias` runs as a Spark query rather than aliased: as it ran
        before, else as its `route_in_log` setting asks (`runtime.aliases`)."""
        data_dir = self.services.data_dir
        if ran_aliased(data_dir, self.id, alias):
            return False
        return ran_as_query(data_dir, self.id, alias) or not self.settings.pipeline(alias).route_in_log

    def prepare(self) -> None:
        """Build every connector (kind and config checked) and import the pipelines' Python operators:
        raises UserError before anything starts."""
        for pipeline in self.graph.pipelines.values():
            check_operators(pipeline)
        for alias, spec in self.graph.connectors.items():
            cls, config = connector_for(spec)  # a `python` connector's class, and the config it gets
            check_connector(cls, alias, config)
            logger = logging.LoggerAdapter(
                logging.getLogger(f"contraflow.connector.{spec.kind}"), {"flow": self.id, "connector": alias}
            )
            ctx = ConnectorContext(
                alias=alias,
                flow_id=self.id,
                kind=spec.kind,
                config=dict(config),
                spec=spec,
                logger=logger,
                state_dir=self.services.data_dir / "connectors" / self.id / alias,
                spu_addr=self.services.spu_addr,
                stop_runtime=self.services.stop_runtime,
                runtime_metrics=self.services.metrics.registry,
                outputs=frozenset(self.topology.outputs_of("connector", alias)),
                inputs=frozenset(r.to.port for _, r in self.topology.inputs_of("connector", alias)),
            )
            ctx.open_breaker = functools.partial(self._sink_breaker, alias, BreakerCause.CAPACITY, True)
            ctx.close_breaker = functools.partial(
                self._sink_breaker, alias, BreakerCause.CAPACITY, False, "recovered"
            )
            ctx.codec(), ctx.preprocessors(), ctx.postprocessors()  # config errors surface now
            self.connectors[alias] = ConnectorInstance(cls(ctx), Gate())
            self._gates[alias] = self.connectors[alias].gate
        for alias in self.graph.connectors:
            outputs = self.topology.outputs_of("connector", alias)
            inputs = self.topology.inputs_of("connector", alias)
            cls = type(self.connectors[alias].connector)
            if outputs and set(outputs) - {"err"} and not cls.is_source:
                raise UserError(f"flow '{self.id}': connector '{alias}' ({cls.kind}) cannot be a source")
            if inputs and not cls.is_sink:
                raise UserError(f"flow '{self.id}': connector '{alias}' ({cls.kind}) cannot be a sink")

    async def start(self) -> None:
        """Topics, then sinks and sources while the pipelines' queries start (each source released
        once its sinks are connected): a query's start takes seconds, and what the sources read
        meanwhile waits in the channels for its first micro-batch."""
        existing = set(await self.client.list_topics())
        config = await self.client.replicated_config(TopicConfig(partitions=1))
        # What a source appended must outlive its SPU's crash (in a cluster: its leader's).
        acks = await self.client.durable_acks()
        self.producer.settings = dataclasses.replace(self.producer.settings, acks=acks)
        for topic in self.topology.channels:
            if topic not in existing:  # a restart reuses its channels (and their offsets)
                await self.client.create_topic(topic, config)
        for alias in self.aliases.pipelines:  # before any reader of it commits an offset
            await asyncio.to_thread(mark_aliased, self.services.data_dir, self.id, alias)
        carried = await self.aliases.carried_before(self.client)
        starting = self._pipelines_to_start()
        self.qos = QosFeed(
            self.id, {alias: self.graph.pipelines[alias] for alias in starting}, self.routes, self.client
        )
        for alias, inst in self.connectors.items():
            self._build_runners(alias, inst)
        self._sources.update(alias for alias, inst in self.connectors.items() if inst.source is not None)
        for alias, inst in self.connectors.items():  # controlled start: every sink's breaker starts open
            if inst.sink is not None:
                self.holds.open[Breaker(alias, BreakerCause.CONNECTION)] = NOT_CONNECTED
        self._breakers_changed(self.holds.apply_breakers())
        self._start_connector_tasks()
        try:
            await self._start_pipelines(starting)
        except BaseException:
            await self._stop_connectors()
            raise
        self.monitor = FlowMonitor(
            self.id,
            self.topology,
            self.settings,
            self.client,
            self.pipelines,
            self.holds.backpressure,
            self.services.metrics,
            self.services.events,
            self.aliases,
            carried,
        )
        for inst in self.connectors.values():
            if inst.sink is not None and inst.sink.hold is not None:
                self.monitor.handed_over.update(inst.sink.handed_over())
        self.state = "running"
        self._monitor_task = asyncio.create_task(self._watch(), name=f"monitor {self.id}")

    def _start_connector_tasks(self) -> None:
        """Sinks first, then sources: each a task guarded by `_guard`."""
        for alias, inst in self.connectors.items():
            if inst.sink is not None:
                self._spawn(inst, self._run_sink(inst.sink), f"sink {self.id}/{alias}")
        for alias, inst in self.connectors.items():
            if inst.source is not None:
                self._spawn(inst, self._run_source(inst.source), f"source {self.id}/{alias}")

    def _spawn(self, inst: ConnectorInstance, work: Any, name: str) -> None:
        inst.tasks.append(asyncio.create_task(self._guard(work, inst.ctx.alias), name=name))

    def runs_queries(self) -> bool:
        """Whether starting this flow starts a Spark query (it then needs the Spark session):
        not when each pipeline is aliased or has no input connected, nor without pipelines."""
        return any(self._query_inputs(alias) for alias in self.graph.pipelines)

    def _query_inputs(self, alias: str) -> list[PipelineInput]:
        """The channels pipeline `alias`'s query reads; none when it is aliased (its readers read its
        inputs: nothing runs) or has no input connected."""
        if alias in self.aliases.pipelines:
            return []
        return [  # a port fed by several connections (fan-in) reads each of their channels
            PipelineInput(reader.to.port, channel.topic, reader.consumer)
            for channel, reader in self.topology.inputs_of("pipeline", alias)
        ]

    def _pipelines_to_start(self) -> dict[str, list[PipelineInput]]:
        """Pipeline alias -> the channels it reads; one with no input connected is not started."""
        starting: dict[str, list[PipelineInput]] = {}
        for alias in self.graph.pipelines:
            inputs = self._query_inputs(alias)
            if inputs:
                starting[alias] = inputs
            elif alias not in self.aliases.pipelines:
                log.warning("flow %s: pipeline %s has no input connected; not started", self.id, alias)
        return starting

    async def _start_pipelines(self, starting: dict[str, list[PipelineInput]]) -> None:
        """Each query starts in a thread (planning, Python workers: seconds), the loop runs on."""
        for alias, inputs in starting.items():
            await self._start_pipeline(alias, inputs)

    async def _start_pipeline(self, alias: str, inputs: list[PipelineInput]) -> None:
        outputs = {port: c.topic for port, c in self.topology.outputs_of("pipeline", alias).items()}
        await self.services.query_stops.wait_for(f"{self.id}/{alias}", EARLIER_STOP_S)
        checkpoint = checkpoint_path(self.services.data_dir, self.id, alias)
        timers = query_has_timers(checkpoint, self.graph.pipelines[alias])  # as the checkpoint began
        for inp in inputs:  # the first batch is admitted by priority too (the monitor takes over)
            await control.credit(inp.consumer, inp.topic).set_async(
                self.client, admitted(self.settings.priority, None)
            )
        spark = await self.services.spark.session()
        self.pipelines[alias] = await asyncio.to_thread(
            start_pipeline_query,
            spark,
            self.id,
            alias,
            self.graph.pipelines[alias],
            spu=self.services.spu_addr,
            inputs=inputs,
            outputs=outputs,
            data_dir=self.services.data_dir,
            trigger=self.settings.pipeline(alias).trigger(timers=timers),
            pool=self.settings.priority,
            timers=timers,
        )

    async def restart_pipeline(self, alias: str, why: str) -> None:
        """Stop a pipeline's query run (if it still runs) and start it again: it resumes from its
        checkpoint, and the sink's exactly-once commits make a replayed batch a no-op."""
        run = self.pipelines[alias]
        self.query_restarts[alias] = self.query_restarts.get(alias, 0) + 1
        log.warning("flow %s: pipeline %s restarts after a transient failure: %s", self.id, alias, why)
        self.services.events.emit("pipeline_restarted", self.id, pipeline=alias, error=why)
        await asyncio.to_thread(run.stop)
        await self._start_pipeline(alias, run.inputs)

    async def _pipeline_failed(self, alias: str, error: str) -> None:
        """A query run died: started again after a transient failure (a few times), else the flow fails."""
        if transient_failure(error) and self.query_restarts.get(alias, 0) < QUERY_RESTARTS:
            await self.restart_pipeline(alias, _headline(error))
            return
        self.state, self.error = "failed", f"pipeline {alias}: {error}"
        log.error("flow %s: pipeline %s failed: %s", self.id, alias, error)
        self.services.events.emit("batch_failed", self.id, pipeline=alias, error=_headline(error))

    def _build_runners(self, alias: str, inst: ConnectorInstance) -> None:
        cls = type(inst.connector)
        outputs = {port: c.topic for port, c in self.topology.outputs_of("connector", alias).items()}
        inputs = [(c.topic, r.consumer, r.to.port) for c, r in self.topology.inputs_of("connector", alias)]
        metrics = self.services.metrics
        inst.connect = SharedConnect(
            inst.connector, functools.partial(self._connect_failed, alias), inst.closing
        )
        if cls.is_source and set(outputs) - {"err"}:
            acks = None
            if cls.acknowledges:
                acks = self.acks[alias] = AckTracker(inst.connector, self.settings.ack == "persisted")
            inst.source = SourceRunner(
                inst.connector, outputs, self.client, self.producer, inst.gate, acks, metrics, inst.connect
            )
            inst.source.turns = YieldBudget(self.settings.priority)
            inst.source.disk_full.report = functools.partial(
                self._sink_breaker, alias, BreakerCause.DISK_FULL
            )
        if cls.is_sink and inputs:
            inst.sink = SinkRunner(
                inst.connector,
                inputs,
                self.client,
                self.producer,
                outputs.get("err"),
                inst.gate,
                self.settings.delivery,
                metrics,
                functools.partial(self._sink_breaker, alias, BreakerCause.CONNECTION),
                inst.connect,
                self.qos.delivery if self.qos is not None and self.qos.active else None,
            )

    # -- running -------------------------------------------------------------------------------

    async def _run_source(self, runner: SourceRunner) -> None:
        alias = runner.ctx.alias
        inst = self.connectors[alias]
        if inst.sink is not None:  # bidirectional: the sink side's connect() opens both
            await inst.sink.ready.wait()
        elif not await runner.start():
            return
        await runner.restore_position()
        await runner.run()

    async def _run_sink(self, runner: SinkRunner) -> None:
        if await runner.connect():
            await runner.run()

    async def _guard(self, work: Any, alias: str) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except UserError as err:  # a mistake only the outside world could reveal (missing topic...)
            log.error("flow %s: connector %s: %s", self.id, alias, err)
            self.error = f"connector {alias}: {err}"
        except Exception as err:
            log.exception("flow %s: connector %s failed", self.id, alias)
            self.error = f"connector {alias}: {err}"

    def _busy(self) -> list[tuple[str, str, float | None]]:
        """Each connector's running send or pull, and since when: what the watchdog times."""
        busy: list[tuple[str, str, float | None]] = []
        for alias, inst in self.connectors.items():
            if inst.source is not None:
                busy.append(("pull", alias, inst.source.pulling_since))
            if inst.sink is not None:
                busy.append(("send", alias, inst.sink.sending_since))
        return busy

    async def _watch(self) -> None:
        assert self.monitor is not None
        while True:
            try:
                with self.services.metrics.timed(self.id, "monitor"):
                    await self.monitor.tick()
                    for tracker in self.acks.values():
                        await tracker.advance(self.monitor.delivered)
                if self.qos is not None and self.qos.active:
                    now_ns = time.time_ns()
                    self.holds.apply_qos_pauses(
                        self.qos.pauses(now_ns), self.topology.feeding_pipeline, now_ns
                    )
                    await self.qos.publish()
                self.watchdog.check(self.monitor.last_batch, self.monitor.input_waiting, self._busy())
                for alias, run in list(self.pipelines.items()):
                    error = run.error()
                    if error and self.state not in ("failed", "draining", "stopped"):
                        await self._pipeline_failed(alias, error)
            except asyncio.CancelledError:
                raise
            except SpuError as err:
                self._monitor_tick_failed(err)
            except Exception:
                log.exception("flow %s: monitor tick failed", self.id)
            await asyncio.sleep(TICK_S)

    def _monitor_tick_failed(self, err: SpuError) -> None:
        """An SPU out of reach (a partition, an election) only delays the monitor: its next
        tick reads again, so one line says so instead of a traceback per tick."""
        if err.retriable or err.code in REROUTE:
            log.warning(
                "flow %s: monitor tick: the SPU did not answer, next tick reads again: %s", self.id, err
            )
        else:
            log.error("flow %s: monitor tick failed: %s", self.id, err, exc_info=err)

    @property
    def breakers(self) -> dict[str, str]:
        """Sink alias -> why its breaker is open (every cause's reason)."""
        return self.holds.breakers()

    def _sink_breaker(self, sink: str, cause: BreakerCause, is_open: bool, why: str) -> None:
        """One cause of a sink's breaker changed: re-hold the sources it stops, count and log it."""
        was_open = self.holds.is_open(sink)
        self._breakers_changed(self.holds.set_breaker(Breaker(sink, cause), is_open, why))
        now_open = self.holds.is_open(sink)
        for channel, _ in self.layout.inputs_of("connector", sink):
            self.services.metrics.set_breaker(self.id, channel.name, now_open)
        if was_open != now_open:
            self.services.events.emit(
                "breaker",
                self.id,
                connector=sink,
                state="open" if now_open else "closed",
                reason=why,
                cause=cause.name.lower(),  # connection, capacity or disk_full
            )

    def _breakers_changed(self, open_sinks: frozenset[str]) -> None:
        """The QoS feed hears every change of the open sinks and marks those outputs unavailable."""
        if self.qos is not None:
            self.qos.breakers(open_sinks)

    def _connect_failed(self, alias: str, why: str) -> None:
        """A failed (re)connect attempt: a warning on the terminal at most once a minute per
        connector (the status line shows the open breaker meanwhile), every attempt in the log."""
        now = time.monotonic()
        quiet = now - self._connect_warned.get(alias, -CONNECT_WARNING_S) < CONNECT_WARNING_S
        if not quiet:
            self._connect_warned[alias] = now
        log.log(logging.INFO if quiet else logging.WARNING, "flow %s: connector %s: %s", self.id, alias, why)

    # -- pause / resume ------------------------------------------------------------------------

    def _check_transition(self, what: str, current: State, desired: str) -> None:
        if current not in ("running", "paused"):
            raise InvalidTransition(what, current, desired)

    async def pause(self) -> None:
        """Sources first (nothing new enters), then sinks."""
        self._check_transition(f"flow '{self.id}'", self.state, "paused")
        for inst in self._sources_then_sinks():
            self._hold(inst, True)
        self.state = "paused"
        self.services.events.emit("pause", self.id)

    async def resume(self) -> None:
        """Sinks first, then sources: the reverse of pause."""
        self._check_transition(f"flow '{self.id}'", self.state, "running")
        for inst in reversed(self._sources_then_sinks()):
            self._hold(inst, False)
        self.state = "running"
        self.services.events.emit("resume", self.id)

    def _sources_then_sinks(self) -> list[ConnectorInstance]:
        sources = [i for i in self.connectors.values() if i.source is not None]
        sinks = [i for i in self.connectors.values() if i.source is None]
        return sources + sinks

    def _hold(self, inst: ConnectorInstance, paused: bool) -> None:
        inst.paused = paused
        self.holds.pause(inst.ctx.alias, paused)

    async def set_connector_paused(self, alias: str, paused: bool) -> None:
        inst = self.connectors[alias]
        current: State = self.connector_state(inst)
        self._check_transition(
            f"connector '{alias}' of flow '{self.id}'", current, "paused" if paused else "running"
        )
        self._hold(inst, paused)
        self.services.events.emit("pause" if paused else "resume", self.id, connector=alias)

    # -- quiescence ----------------------------------------------------------------------------

    async def quiesce(self, shutdown: bool = False, cut_short: asyncio.Event | None = None) -> None:
        """Stop the flow in bounded tiers (`runtime.cancellation`): cooperative drain, cancel the
        pipelines' Spark jobs, stop their queries, cancel connector tasks; never past the ceiling
        (the shutdown one when the runtime stops). `cut_short` set ends the drain at once."""
        if self.state in ("stopped", "draining"):
            await self.finished.wait()
            return
        failed = self.state == "failed"
        self.state = "draining"
        ceiling_s = self.settings.cancel.ceiling(shutdown)
        tiers = TieredCancel(self.id, ceiling_s, self.services.events)
        drained = await tiers.run("cooperative", self._cooperative_stop(failed), cut_short)
        busy = drained != "done" and self.pipelines
        await tiers.run("cancel_jobs", self._cancel_jobs() if busy else None)
        await tiers.run("stop_queries", self._stop_queries())
        await tiers.run("cancel_tasks", self._stop_connectors())
        await self.client.close()  # closes its socket at once, even after a tier ran out of time
        self.state = "stopped"
        self.finished.set()

    async def _cooperative_stop(self, failed: bool) -> None:
        """Sources stop pulling; pipelines and sinks drain the channels; offsets are committed."""
        for inst in self.connectors.values():
            if inst.source is not None:
                inst.ctx.quiescing.set()
            inst.gate.release("paused")  # a paused sink must drain too
        waits = [inst.source.stopped.wait() for inst in self.connectors.values() if inst.source is not None]
        await asyncio.gather(*waits)
        await self.producer.flush()
        if not failed:  # a failed pipeline drains nothing: its input stays in the log for the next start
            await self._drain()

    async def _drain(self) -> None:
        """Wait until every channel is read and delivered (the tier's deadline bounds it)."""
        while self.monitor is not None:
            await asyncio.sleep(TICK_S)
            await self._settle_holding_sinks()
            if self.monitor.drained() and all(t.pending == 0 for t in self.acks.values()):
                return

    async def _settle_holding_sinks(self) -> None:
        """While draining: once every channel but theirs is read, holding sinks that were handed all of
        theirs deliver it (their offsets, and so the drain, wait for that)."""
        assert self.monitor is not None
        holding = [i.sink for i in self.connectors.values() if i.sink is not None and i.sink.hold is not None]
        theirs = {topic for runner in holding for topic, _, _ in runner.inputs}
        states = self.monitor.states
        if not holding or any(state.depth for topic, state in states.items() if topic not in theirs):
            return
        ends = {topic: states[topic].end for topic in theirs}
        for runner in holding:
            if runner.caught_up(ends):
                await runner.settle()

    async def _cancel_jobs(self) -> None:
        """Cancel every pipeline's running Spark jobs: interrupts tasks stuck past the drain."""
        context = (await self.services.spark.session()).sparkContext  # running: queries run on it
        for run in self.pipelines.values():
            await asyncio.to_thread(context.cancelJobGroup, run.run_id)

    async def _stop_queries(self) -> None:
        if self._monitor_task is not None:
            self._monitor_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor_task
        stops = self.services.query_stops
        tracked = [stops.track(run.name, asyncio.to_thread(run.stop)) for run in self.pipelines.values()]
        await asyncio.gather(*map(asyncio.shield, tracked))  # a timed-out tier leaves them running

    async def _stop_connectors(self) -> None:
        """Ask connector tasks to stop, give them a moment, cancel what is left, close everything."""
        for inst in self.connectors.values():
            inst.closing.set()
            inst.ctx.quiescing.set()
            if inst.sink is not None:
                inst.sink.stop.set()
        tasks = [task for inst in self.connectors.values() for task in inst.tasks]
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_GRACE_S)
        for task in tasks:
            task.cancel()
        # Tokens still pending are neither acked nor failed: their data is read again after a restart.
        closing = {asyncio.ensure_future(i.connector.close()): i.ctx.alias for i in self.connectors.values()}
        if closing:
            done, stuck = await asyncio.wait(closing, timeout=STOP_GRACE_S)
            for task in done:
                if task.exception() is not None:
                    log.error("flow %s: closing %s failed: %s", self.id, closing[task], task.exception())
            for task in stuck:
                log.warning(
                    "flow %s: %s did not close in %.1fs; left behind", self.id, closing[task], STOP_GRACE_S
                )
        await self.producer.close()
        await self.client.close()

    # -- status --------------------------------------------------------------------------------

    def connector_state(self, inst: ConnectorInstance) -> State:
        if self.state in ("initializing", "draining", "stopped", "failed"):
            return self.state
        return "paused" if inst.paused else "running"

    def connector_status(self, alias: str) -> ConnectorStatus:
        inst = self.connectors[alias]
        pipelines: dict[str, list[PipelineEndpoint]] = {}
        for port, channel in self.layout.outputs_of("connector", alias).items():
            pipelines[port] = [PipelineEndpoint(r.to.alias, r.to.port) for r in channel.readers]
        for channel, reader in self.layout.inputs_of("connector", alias):
            pipelines.setdefault(reader.to.port, []).append(
                PipelineEndpoint(channel.producer.alias, channel.producer.port)
            )
        connected = inst.sink.connected if inst.sink is not None else self.state in ("running", "paused")
        reason = self.breakers.get(alias)
        return ConnectorStatus(
            alias,
            inst.ctx.kind,
            self.connector_state(inst),
            "connected" if connected else "disconnected",
            pipelines,
            breaker="open" if reason is not None else "closed",
            breaker_reason=reason,
            held_by=inst.gate.reasons,
        )

    def channel_status(self, channel: Channel) -> ChannelStatus:
        """A channel as written; an aliased one shows the topic it is read from, and that topic's figures."""
        topic = self.aliases.topic_of(channel.topic)
        state = self.monitor.states.get(topic) if self.monitor is not None else None
        return ChannelStatus(
            channel.name,
            topic,
            _node(channel.producer),
            [_node(r.to) for r in channel.readers],
            depth=state.depth if state else 0,
            backpressure=state.stopped if state else False,
            appended=state.end if state else 0,
            events_per_s=round(state.events_per_s, 1) if state else 0.0,
        )

    def status(self) -> FlowStatus:
        return FlowStatus(
            self.id,
            self.state,
            self.graph.definition,
            [self.connector_status(a) for a in self.connectors],
            list(self.graph.pipelines),
            priority=self.settings.priority,
            channels=[self.channel_status(c) for c in self.layout.channels.values()],
        )


def _headline(error: str) -> str:
    """A JVM error without its stack frames: what a person reads in an event (the log has it all)."""
    return error.split("\n\tat ", 1)[0].strip()


def _node(endpoint: Endpoint) -> NodeRef:
    return NodeRef(endpoint.kind, endpoint.alias, endpoint.port)
