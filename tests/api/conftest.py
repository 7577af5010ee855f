"""A real uvicorn server on 127.0.0.1 over an in-memory `RuntimeFacade`.

The in-memory runtime is the one stand-in of these tests: the real runtime
is built in parallel and has its own end-to-end API tests. It compiles Troy
with the real compiler, so deploy errors are the real language errors; flow
and connector states are plain data the tests set and inspect.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

import contraflow
from contraflow.api.app import create_app
from contraflow.api.facade import (
    Connectivity,
    ConnectorStatus,
    DesiredState,
    FlowExists,
    FlowStatus,
    SparkState,
    State,
    UnknownConnector,
    UnknownFlow,
    describe_flow,
)
from contraflow.api.server import ApiServer
from contraflow.lang.graph import Deployment, FlowGraph
from contraflow.lang.troy.compiler import compile_source
from contraflow.runtime.event_stream import EventStream
from contraflow.runtime.metrics import RuntimeMetrics

TWO_FLOWS = """
define flow ingest
args
  file = "a.log"
flow
  define connector src from file
  args path
  with codec = "string", config = {"path": args.path, "mode": "read"}
  end;
  define connector dst from file
  args path
  with codec = "json", config = {"path": args.path, "mode": "append"}
  end;
  define pipeline wrap
  pipeline
    select {"line": event} from in into out;
  end;
  create connector src with path = args.file end;
  create connector dst with path = "out.log" end;
  create pipeline wrap;
  connect /connector/src to /pipeline/wrap;
  connect /pipeline/wrap to /connector/dst;
end;
deploy flow main from ingest;
deploy flow second from ingest with file = "b.log" end;
"""


@functools.cache
def two_flows() -> Deployment:
    return compile_source(TWO_FLOWS, "flows.troy")


class InMemoryRuntime:
    """A `RuntimeFacade` keeping flows as plain data; records every state change it is asked for."""

    def __init__(self) -> None:
        self.flows: dict[str, FlowStatus] = {}
        self.metrics = RuntimeMetrics()
        self.changes: list[tuple[str, ...]] = []
        self.fail_with: Exception | None = None
        self.events = EventStream(None)  # the real event stream, in memory only
        self.spark: SparkState = "running"

    def version(self) -> str:
        return contraflow.__version__

    def _check(self) -> None:
        if self.fail_with is not None:
            raise self.fail_with

    async def list_flows(self) -> list[FlowStatus]:
        self._check()
        return list(self.flows.values())

    def spark_state(self) -> SparkState:
        return self.spark

    async def get_flow(self, flow_id: str) -> FlowStatus:
        self._check()
        try:
            return self.flows[flow_id]
        except KeyError:
            raise UnknownFlow(flow_id) from None

    async def set_flow_status(self, flow_id: str, status: DesiredState) -> FlowStatus:
        flow = await self.get_flow(flow_id)
        self.changes.append(("flow", flow_id, status))
        connectors = [dataclasses.replace(c, status=status) for c in flow.connectors]
        self.flows[flow_id] = dataclasses.replace(flow, status=status, connectors=connectors)
        return self.flows[flow_id]

    async def set_connector_status(self, flow_id: str, alias: str, status: DesiredState) -> ConnectorStatus:
        flow = await self.get_flow(flow_id)
        if flow.connector(alias) is None:
            raise UnknownConnector(flow_id, alias)
        self.changes.append(("connector", flow_id, alias, status))
        connectors = [
            dataclasses.replace(c, status=status) if c.alias == alias else c for c in flow.connectors
        ]
        self.flows[flow_id] = dataclasses.replace(flow, connectors=connectors)
        found = self.flows[flow_id].connector(alias)
        assert found is not None
        return found

    async def deploy(self, source: str, name: str) -> list[str]:
        self._check()
        deployment = await asyncio.to_thread(compile_source, source, name)  # as the real runtime does
        for flow_id in deployment.flows:
            if flow_id in self.flows:
                raise FlowExists(flow_id)
        for flow_id, graph in deployment.flows.items():
            self.add(graph)
            self.changes.append(("deploy", flow_id))
        return list(deployment.flows)

    def add(self, graph: FlowGraph) -> None:
        """Start a compiled flow: it and its connectors are running and connected."""
        connectors: dict[str, tuple[State, Connectivity]] = {
            a: ("running", "connected") for a in graph.connectors
        }
        self.flows[graph.name] = describe_flow(graph, "running", connectors)

    async def undeploy(self, flow_id: str) -> FlowStatus:
        flow = await self.get_flow(flow_id)
        del self.flows[flow_id]
        self.metrics.forget_flow(flow_id)
        self.changes.append(("undeploy", flow_id))
        return dataclasses.replace(flow, status="stopped")

    def metrics_registry(self) -> CollectorRegistry:
        return self.metrics.registry

    def subscribe_events(
        self, flow: str | None, history: int, after: int | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        return self.events.subscribe(flow, history, after)

    # Test helpers: what the real runtime would change on its own.
    def set_state(self, flow_id: str, status: State) -> None:
        self.flows[flow_id] = dataclasses.replace(self.flows[flow_id], status=status)

    def set_connector_state(self, flow_id: str, alias: str, status: State) -> None:
        flow = self.flows[flow_id]
        connectors = [
            dataclasses.replace(c, status=status) if c.alias == alias else c for c in flow.connectors
        ]
        self.flows[flow_id] = dataclasses.replace(flow, connectors=connectors)


async def _cancel_other_tasks() -> None:
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


class ServerThread:
    """An `ApiServer` on its own event loop in a thread, as the runtime would run it in its loop."""

    def __init__(
        self,
        runtime: InMemoryRuntime,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: tuple[str, str] | None = None,
        **app_options: Any,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="api-test-loop", daemon=True)
        cert, key = tls or (None, None)
        self.server = ApiServer(create_app(runtime, **app_options), host, port, tls_cert=cert, tls_key=key)

    def run(self, coro: Any, timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> str:
        self.thread.start()
        address: str = self.run(self.server.start())
        return address

    def stop(self) -> None:
        self.run(self.server.stop())
        self.run(_cancel_other_tasks())  # e.g. sse_starlette's shutdown watcher, left by event streams
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture(scope="session")
def api_runtime() -> InMemoryRuntime:
    return InMemoryRuntime()


@pytest.fixture(scope="session")
def api_server(api_runtime: InMemoryRuntime) -> Iterator[str]:
    """Base URL of one server shared by the session (starting one per test costs 0.1 s each)."""
    thread = ServerThread(api_runtime)
    address = thread.start()
    yield f"http://{address}"
    thread.stop()


@pytest.fixture
def runtime(api_runtime: InMemoryRuntime) -> InMemoryRuntime:
    """The shared runtime, emptied and holding the flows `main` and `second` (running)."""
    api_runtime.flows.clear()
    api_runtime.changes.clear()
    api_runtime.fail_with = None
    api_runtime.metrics = RuntimeMetrics()
    for graph in two_flows().flows.values():
        api_runtime.add(graph)
    return api_runtime


@pytest.fixture
def client(api_server: str, runtime: InMemoryRuntime) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_server, timeout=10) as c:
        yield c
