"""The facade's helpers: status reports built from a compiled flow graph."""

from __future__ import annotations

from contraflow.api.facade import (
    PipelineEndpoint,
    RuntimeFacade,
    UnknownConnector,
    UnknownFlow,
    connector_pipelines,
    describe_flow,
)
from contraflow.errors import UserError
from contraflow.lang.troy.compiler import compile_source
from tests.api.conftest import InMemoryRuntime, two_flows

FAN_OUT = """
define flow fan
flow
  define connector io from stdio
  with codec = "json" end;
  define pipeline a
  pipeline
    select event from in into out;
  end;
  define pipeline b
  pipeline
    select event from in into out;
  end;
  create connector io;
  create pipeline a;
  create pipeline b;
  connect /connector/io to /pipeline/a;
  connect /connector/io to /pipeline/b;
  connect /pipeline/a to /connector/io;
  connect /pipeline/b/err to /connector/io/stderr;
end;
deploy flow fan;
"""


def test_in_memory_runtime_satisfies_the_protocol() -> None:
    assert isinstance(InMemoryRuntime(), RuntimeFacade)


def test_connector_pipelines_per_port() -> None:
    graph = compile_source(FAN_OUT, "fan.troy").flows["fan"]
    assert connector_pipelines(graph, "io") == {
        "out": [PipelineEndpoint("a", "in"), PipelineEndpoint("b", "in")],
        "in": [PipelineEndpoint("a", "out")],
        "stderr": [PipelineEndpoint("b", "err")],
    }


def test_describe_flow_defaults_connectors_to_the_flow_state() -> None:
    graph = two_flows().flows["main"]
    flow = describe_flow(graph, "paused", {"dst": ("failed", "disconnected")})
    assert (flow.id, flow.status, flow.definition, flow.pipelines) == ("main", "paused", "ingest", ["wrap"])
    src, dst = flow.connectors
    assert (src.alias, src.kind, src.status, src.connectivity) == ("src", "file", "paused", "disconnected")
    assert (dst.status, dst.connectivity) == ("failed", "disconnected")
    assert flow.connector("dst") == dst
    assert flow.connector("nope") is None


def test_lookup_errors_are_user_errors() -> None:
    assert isinstance(UnknownFlow("x"), UserError)
    assert str(UnknownConnector("f", "c")) == "connector 'c' not found in flow 'f'"
