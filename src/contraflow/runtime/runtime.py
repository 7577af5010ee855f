"""The runtime: every deployed flow instance of one process, and the `RuntimeFacade` the REST API uses.

It owns no SPU and no Spark session (the `run` command or a test hands them
in, the session as a running one or as a `SparkOnDemand` that starts when a
query first needs it), so the same object serves `contraflow run`, tests and
benchmarks. Deploying is all-or-nothing: every flow of a Troy source is
prepared (kinds, configs, settings checked) and, when one of them runs a Spark
query, the Spark session awaited, before the first one starts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from contraflow import __version__
from contraflow.api.facade import (
    ConnectorStatus,
    DesiredState,
    FlowExists,
    FlowStatus,
    SparkState,
    UnknownConnector,
    UnknownFlow,
)
from contraflow.errors import UserError
from contraflow.lang.graph import Deployment
from contraflow.lang.troy.compiler import compile_source
from contraflow.runtime.event_stream import EventStream, RuntimeEvent
from contraflow.runtime.flow import FlowInstance, Services
from contraflow.runtime.kept_flows import KeptFlows
from contraflow.runtime.metrics import RuntimeMetrics
from contraflow.runtime.spark_on_demand import SparkOnDemand

log = logging.getLogger("contraflow.runtime")


class Runtime:
    """Deployed flows by id; implements `contraflow.api.facade.RuntimeFacade`."""

    def __init__(
        self,
        spu_addr: str,
        spark: SparkOnDemand | Any,  # or a running SparkSession, or None (no flow may run a query)
        data_dir: Path,
        metrics: RuntimeMetrics | None = None,
        stop_requested: asyncio.Event | None = None,
    ) -> None:
        self.metrics = metrics or RuntimeMetrics()
        self.flows: dict[str, FlowInstance] = {}
        self.stop_requested = stop_requested or asyncio.Event()
        self.events = EventStream(spu_addr)
        self.spark = spark if isinstance(spark, SparkOnDemand) else SparkOnDemand.of(spark)
        self.services = Services(
            spu_addr, self.spark, Path(data_dir), self.metrics, self.request_stop, self.events
        )
        self.kept = KeptFlows(Path(data_dir))

    def request_stop(self) -> None:
        """Ask the process to quiesce every flow and exit (SIGINT/SIGTERM, the `exit` connector)."""
        self.stop_requested.set()

    # -- deploying -----------------------------------------------------------------------------

    async def deploy_graphs(self, deployment: Deployment) -> list[str]:
        """Prepare every flow of `deployment`, wait for Spark if one of them runs a query (starting
        it if nobody did), then start them in order; returns their ids."""
        await self.events.open()  # `seq` goes on from the earlier runs' events before any is emitted
        self._check_new(deployment)
        instances = [FlowInstance(fid, graph, self.services) for fid, graph in deployment.flows.items()]
        for instance in instances:
            instance.prepare()
        if any(instance.runs_queries() for instance in instances):
            await self.spark.session()  # raises SparkUnavailable (nothing started)
            self._check_new(deployment)  # another deployment may have taken an id meanwhile
        for instance in instances:
            self.flows[instance.id] = instance
            await instance.start()
            self.events.emit(
                "deploy",
                instance.id,
                definition=instance.graph.definition,
                priority=instance.settings.priority,
            )
        return [i.id for i in instances]

    def _check_new(self, deployment: Deployment) -> None:
        for flow_id in deployment.flows:
            if flow_id in self.flows:
                raise FlowExists(flow_id)

    async def quiesce_all(self, cut_short: asyncio.Event | None = None, shutdown: bool = True) -> None:
        """Quiesce every flow (all at once: they share nothing but the SPU and Spark) within its
        shutdown ceiling (`shutdown=False`: its undeploy one), then flush the event stream and end
        its subscriptions. `cut_short` set (a second Ctrl-C) ends every flow's drain at once."""
        await asyncio.gather(*(f.quiesce(shutdown, cut_short) for f in self.flows.values()))
        await self.events.close()

    def _flow(self, flow_id: str) -> FlowInstance:
        flow = self.flows.get(flow_id)
        if flow is None:
            raise UnknownFlow(flow_id)
        return flow

    # -- RuntimeFacade -------------------------------------------------------------------------

    def version(self) -> str:
        return __version__

    async def list_flows(self) -> list[FlowStatus]:
        return [f.status() for f in self.flows.values()]

    def spark_state(self) -> SparkState:
        return self.spark.state

    async def get_flow(self, flow_id: str) -> FlowStatus:
        return self._flow(flow_id).status()

    async def set_flow_status(self, flow_id: str, status: DesiredState) -> FlowStatus:
        flow = self._flow(flow_id)
        if status == "paused":
            await flow.pause()
        else:
            await flow.resume()
        return flow.status()

    async def set_connector_status(self, flow_id: str, alias: str, status: DesiredState) -> ConnectorStatus:
        flow = self._flow(flow_id)
        if alias not in flow.connectors:
            raise UnknownConnector(flow_id, alias)
        await flow.set_connector_paused(alias, status == "paused")
        return flow.connector_status(alias)

    async def deploy(self, source: str, name: str) -> list[str]:
        directory = Path.cwd()
        deployment = await asyncio.to_thread(compile_source, source, name, directory)
        flow_ids = await self.deploy_graphs(deployment)
        await asyncio.to_thread(self.kept.keep, flow_ids, source, name, directory)  # fsyncs
        return flow_ids

    async def redeploy_kept(self) -> list[str]:
        """Deploy again every flow an earlier run deployed through the API (`kept_flows`); a flow
        id the command line deployed already, or a source that no longer compiles or starts, is
        a `redeploy_failed` event and the others go on. Returns the ids redeployed."""
        redeployed = []
        for kept in await asyncio.to_thread(self.kept.all):
            try:
                if kept.flow_id in self.flows:
                    raise FlowExists(kept.flow_id)
                deployment = await asyncio.to_thread(
                    compile_source, kept.source, kept.name, Path(kept.directory)
                )
                graph = deployment.flows[kept.flow_id]
                redeployed += await self.deploy_graphs(Deployment({kept.flow_id: graph}))
            except (UserError, KeyError) as err:
                self.events.emit("redeploy_failed", kept.flow_id, error=str(err) or type(err).__name__)
        return redeployed

    async def undeploy(self, flow_id: str) -> FlowStatus:
        flow = self._flow(flow_id)
        await flow.quiesce()
        await asyncio.to_thread(self.kept.forget, flow_id)
        del self.flows[flow_id]
        self.metrics.forget_flow(flow_id)
        self.events.emit("undeploy", flow_id)
        return flow.status()

    def metrics_registry(self) -> CollectorRegistry:
        return self.metrics.registry

    def subscribe_events(
        self, flow: str | None, history: int, after: int | None = None
    ) -> AsyncIterator[RuntimeEvent]:
        return self.events.subscribe(flow, history, after)
