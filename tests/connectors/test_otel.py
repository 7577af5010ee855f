"""otel_server with the OpenTelemetry SDK's OTLP/gRPC exporters as its clients; otel_client against a
collector made of opentelemetry-proto's generated servicers (grpcio); both in a flow."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from contraflow.connectors.base import ConnectionLost, ConnectorConfigError, DeliveryFailed
from contraflow.connectors.base.otlp import SIGNALS, OtlpShapeError, event_to_request, request_to_event
from contraflow.connectors.otel_client import OtelClientConnector
from contraflow.connectors.otel_server import OtelServerConnector
from contraflow.events import decode_value, encode_value
from contraflow.lang.troy.compiler import compile_source
from tests.connectors.otel_peer import Collector, export, export_all, record_telemetry
from tests.connectors.support import make, run, sink_event
from tests.runtime.harness import flow_id, free_port, running, wait_for

TRACE = next(s for s in SIGNALS if s.key == "trace")


def sdk_events() -> dict[str, Any]:
    """Signal key -> the SDK's export request as Tremor's event, through the channel's encoding."""
    requests = record_telemetry().requests()
    return {s.key: decode_value(encode_value(request_to_event(s, requests[s.key]))) for s in SIGNALS}


async def started_server(**config: Any) -> OtelServerConnector:
    conn = make("otel_server", {"url": "127.0.0.1:0", **config})
    assert isinstance(conn, OtelServerConnector)
    await conn.connect()
    return conn


def test_sdk_exports_are_tremor_events_and_answered_only_once_acked() -> None:
    async def body() -> None:
        conn = await started_server()
        exported = asyncio.create_task(asyncio.to_thread(export_all, record_telemetry(), conn.port))
        events: dict[str, Any] = {}
        for _ in SIGNALS:  # the exporters send one after the other: each waits for its answer
            item = await asyncio.wait_for(conn.pull(), 10)
            assert item is not None and item.events is not None and item.token is not None
            ((value, meta),) = item.events
            assert meta["otel_server"]["peer"].startswith("ipv")
            events.update(value)
            await asyncio.sleep(0.1)
            assert not exported.done()  # not delivered yet: the exporter is still waiting
            await conn.ack(item.token)
        assert await asyncio.wait_for(exported, 10) == ["SUCCESS", "SUCCESS", "SUCCESS"]

        (resource_spans,) = events["trace"]
        assert resource_spans["resource"]["attributes"]["service.name"] == "checkout"
        (scope_spans,) = resource_spans["scope_spans"]
        assert (scope_spans["scope"]["name"], scope_spans["scope"]["version"]) == ("shop", "1.2")
        spans = {span["name"]: span for span in scope_spans["spans"]}
        assert spans["order"]["attributes"] == {"http.target": "/order", "items": 3}
        assert spans["payment"]["attributes"] == {"amounts": [1.5, 2.5]}
        assert spans["payment"]["parent_span_id"] == spans["order"]["span_id"]  # hex, as Tremor's
        assert len(spans["order"]["trace_id"]) == 32 and spans["order"]["kind"] == 1
        (record,) = events["logs"][0]["scope_logs"][0]["log_records"]
        assert (record["body"], record["severity_number"], record["severity_text"]) == (
            "disk full",
            13,
            "WARN",
        )
        metrics = {m["name"]: m for m in events["metrics"][0]["scope_metrics"][0]["metrics"]}
        orders = metrics["orders"]["data"]["sum"]
        assert orders["is_monotonic"] is True
        assert [(p["value"], p["attributes"]) for p in orders["data_points"]] == [(2, {"region": "eu"})]
        (latency,) = metrics["latency"]["data"]["histogram"]["data_points"]
        assert (latency["count"], latency["sum"], latency["min"], metrics["latency"]["unit"]) == (
            1,
            12.5,
            12.5,
            "ms",
        )
        await conn.close()

    run(body())


def test_events_map_back_to_the_sdks_requests_and_bad_shapes_say_where() -> None:
    requests = record_telemetry().requests()
    for signal in SIGNALS:
        event = decode_value(encode_value(request_to_event(signal, requests[signal.key])))
        assert event_to_request(signal, event) == requests[signal.key]
    legacy = request_to_event(TRACE, requests["trace"])  # Tremor 0.12's: OTLP's names before 0.15
    legacy["trace"][0]["instrumentation_library_spans"] = legacy["trace"][0].pop("scope_spans")
    for scope_spans in legacy["trace"][0]["instrumentation_library_spans"]:
        scope_spans["instrumentation_library"] = scope_spans.pop("scope")
    assert event_to_request(TRACE, legacy) == requests["trace"]
    event = sdk_events()["trace"]
    event["trace"][0]["scope_spans"][0]["spans"][1]["span_id"] = "not hex"
    with pytest.raises(
        OtlpShapeError, match=r"trace\[0\]\.scope_spans\[0\]\.spans\[1\]\.span_id: expected a hex"
    ):
        event_to_request(TRACE, event)
    with pytest.raises(OtlpShapeError, match=r"trace\[0\]\.resource\.attributes\.big: Value out of range"):
        event_to_request(TRACE, {"trace": [{"resource": {"attributes": {"big": 2**70}}}]})
    with pytest.raises(OtlpShapeError, match=r"trace\[0\]\.schema_url: expected a string, got 7"):
        event_to_request(TRACE, {"trace": [{"schema_url": 7}]})
    with pytest.raises(OtlpShapeError, match=r"\.data: expected a record with one of gauge, sum"):
        event_to_request(SIGNALS[1], {"metrics": [{"scope_metrics": [{"metrics": [{"data": {"pie": {}}}]}]}]})


def test_failed_delivery_bad_bodies_and_switched_off_services_are_grpc_statuses() -> None:
    async def body() -> None:
        conn = await started_server(logs=False)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{conn.port}") as channel:
            traces = trace_service_pb2_grpc.TraceServiceStub(channel)
            request = event_to_request(TRACE, sdk_events()["trace"])
            call = asyncio.ensure_future(traces.Export(request, timeout=10))
            item = await asyncio.wait_for(conn.pull(), 10)
            assert item is not None
            await conn.fail(item.token)
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await call
            assert failed.value.code() == grpc.StatusCode.UNAVAILABLE  # what OTLP senders retry

            garbage = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await garbage(b"\xff\xff\xff", timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "not an OTLP trace request" in (refused.value.details() or "")
            assert await traces.Export(trace_service_pb2.ExportTraceServiceRequest(), timeout=10) is not None
            assert conn.inbox.empty()  # nothing to deliver: answered at once, the server still serving

            logs = logs_service_pb2_grpc.LogsServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as off:
                await logs.Export(logs_service_pb2.ExportLogsServiceRequest(), timeout=10)
            assert off.value.code() == grpc.StatusCode.UNIMPLEMENTED

            waiting = asyncio.ensure_future(traces.Export(request, timeout=10))
            assert await asyncio.wait_for(conn.pull(), 10) is not None
            await conn.close()  # a call still waiting is told to retry
            with pytest.raises(grpc.aio.AioRpcError) as stopped:
                await waiting
            assert stopped.value.code() == grpc.StatusCode.UNAVAILABLE

    run(body())


def test_client_exports_what_the_collector_takes_and_reconnects_without_sending_twice() -> None:
    async def body() -> None:
        collector = Collector(refuse="refuse-me")
        port = await collector.start()
        conn = make("otel_client", {"url": f"127.0.0.1:{port}"})
        assert isinstance(conn, OtelClientConnector)
        await conn.connect()
        events = sdk_events()
        batch = [sink_event(events[key], offset=i) for i, key in enumerate(["trace", "logs", "metrics"])]
        for event in batch:
            event.channel = "chan"
        await conn.send(batch)
        expected = [(s.key, event_to_request(s, events[s.key])) for s in SIGNALS]
        assert sorted(collector.received, key=str) == sorted(expected, key=str)  # the same protos

        refused = sdk_events()["logs"]
        refused["logs"][0]["scope_logs"][0]["log_records"][0]["body"] = "refuse-me"
        bad_id = sdk_events()["trace"]
        bad_id["trace"][0]["scope_spans"][0]["spans"][0]["trace_id"] = "xyz"
        mixed = [
            sink_event(refused),
            sink_event({"hello": 1}),
            sink_event(bad_id),
            sink_event(events["trace"]),
        ]
        with pytest.raises(DeliveryFailed) as failed:
            await conn.send(mixed)
        assert failed.value.rejected == mixed[:3]  # to err; the last one was exported
        reason = str(failed.value)
        assert "INVALID_ARGUMENT: refused: refuse-me" in reason
        assert "none of the keys logs, metrics, trace" in reason and "trace_id: expected a hex" in reason
        assert len(collector.received) == 4

        await collector.stop()  # the collector goes away in the middle of a batch
        collector.received.clear()
        again = [sink_event(events[key], offset=10 + i) for i, key in enumerate(["trace", "logs"])]
        for event in again:
            event.channel = "chan"
        with pytest.raises(ConnectionLost):
            await conn.send(again)
        with pytest.raises(ConnectionLost, match="no OTLP/gRPC collector answers"):
            await conn.connect()
        await collector.start(port)
        await conn.connect()
        await conn.send(again)  # the runtime sends the batch again after the reconnect
        assert [key for key, _ in collector.received] == ["trace", "logs"]
        await conn.send(again)  # all of it exported already: nothing is sent twice
        assert len(collector.received) == 2
        await conn.close()
        await collector.stop()

    run(body())


def test_config_is_tremors_with_its_defaults() -> None:
    options = OtelServerConnector.read_config("o", {})
    assert (options.url.host, options.url.port) == ("localhost", 4317)
    assert [s.key for s in options.signals] == ["logs", "metrics", "trace"]
    options = OtelClientConnector.read_config("o", {"url": "https://collector", "metrics": False})
    assert (options.url.host, options.url.port) == ("collector", 4317)
    assert [s.key for s in options.signals] == ["logs", "trace"]
    with pytest.raises(
        ConnectorConfigError, match=r"connector 'o' \(otel_client\): unknown config key 'tls'"
    ):
        OtelClientConnector.check_config("o", {"tls": True})
    with pytest.raises(ConnectorConfigError, match="config key 'trace' must be true or false"):
        OtelServerConnector.check_config("o", {"trace": "yes"})


def test_port_in_use_is_a_lost_connection() -> None:
    async def body() -> None:
        first = await started_server()
        second = make("otel_server", {"url": f"127.0.0.1:{first.port}"})
        with pytest.raises(ConnectionLost, match="cannot listen on 127.0.0.1"):
            await second.connect()
        await first.close()

    run(body())


RELAY_FLOW = """
define flow {fid}
flow
  define connector receiver from otel_server
  with config = {{"url": "127.0.0.1:{listen}", "compression": "gzip"}}
  end;
  define connector sender from otel_client
  with config = {{"url": "127.0.0.1:{collector}", "compression": "gzip"}},
    reconnect = {{"retry": {{"interval_ms": 100, "growth_rate": 1}}}}
  end;
  define pipeline relay
  pipeline
    select event from in into out;
  end;
  create connector receiver;
  create connector sender;
  create pipeline relay;
  connect /connector/receiver to /pipeline/relay;
  connect /pipeline/relay to /connector/sender;
end;
deploy flow {fid};
"""


def test_a_flow_relays_the_sdks_telemetry_to_a_collector(spark: Any, spu_addr: str, tmp_path: Path) -> None:
    """SDK exporters -> otel_server -> pipeline -> otel_client -> collector: each export is answered
    once its data reached the collector, and the collector gets the SDK's requests unchanged (both
    connectors with Tremor's `"compression": "gzip"`). A collector that goes away opens the client's
    breaker; the export in flight is answered once the collector is back, and delivered once."""
    telemetry = record_telemetry()
    fid = flow_id("otelrelay")

    async def scenario() -> None:
        collector = Collector()
        collector_port = await collector.start()
        listen = free_port()
        source = RELAY_FLOW.format(fid=fid, listen=listen, collector=collector_port)
        async with running(spu_addr, spark, tmp_path / "data", source) as runtime:
            exports = [asyncio.to_thread(export, telemetry, listen, s.key) for s in SIGNALS]
            results = await asyncio.wait_for(asyncio.gather(*exports), 60)  # the three at once
            assert results == ["SUCCESS", "SUCCESS", "SUCCESS"]
            # answered only after delivery: the collector has every request by then
            assert dict(collector.received) == telemetry.requests()
            # the collector goes away: the breaker opens, the export waits for it to come back
            flow = runtime.flows[fid]
            await collector.stop()
            again = asyncio.ensure_future(asyncio.to_thread(export, telemetry, listen, "logs"))
            await wait_for(lambda: "sender" in flow.breakers, what="the sender's breaker to open")
            assert "connection lost" in flow.breakers["sender"]
            assert len(collector.received) == 3
            await collector.start(collector_port)
            assert await asyncio.wait_for(again, 60) == "SUCCESS"
            assert not flow.breakers
            assert collector.received[3:] == [("logs", telemetry.requests()["logs"])]  # once
        await collector.stop()

    asyncio.run(scenario())


# Tremor's integration tests otel, otel-compression and otel-client (tremor-cli/tests/integration), with
# the connectors their `integration` module defines (files, cb) written out here.
TREMOR_OTEL = """
define flow server
flow
  use tremor::pipelines;
  use tremor::connectors;

  define connector otel_server from otel_server
  with
    config = {
      "url": "127.0.0.1:4317",
      "compression": "gzip",
    }
  end;

  define pipeline instrument
  into out, exit
  pipeline
    # recording
    select event from in into out;

    # quiescence
    select { "exit": 0, "delay": 10 } from in
    where present event.trace[0].instrumentation_library_spans[0].spans[0].attributes.`http.target`
    into exit;
  end;

  define connector write_file from file
  with codec = "json", postprocessors = ["separate"], config = {"path": "out.log", "mode": "truncate"}
  end;
  create connector data_out from write_file;
  create connector exit from connectors::exit;
  create connector otels from otel_server;
    create connector stdio from connectors::console;

  create pipeline echo from instrument;
  create pipeline passthrough from pipelines::passthrough;

  connect /connector/otels to /pipeline/echo;
  connect /connector/otels to /pipeline/passthrough;

  connect /pipeline/passthrough to /connector/stdio;
  connect /pipeline/echo to /connector/data_out;
  connect /pipeline/echo/exit to /connector/exit;
end;

define flow client
flow
  use tremor::pipelines;

  define connector otel_client from otel_client
  with
    config = {
      "url": "127.0.0.1:4317",
      "compression": "gzip",
    },
    reconnect = {
      "retry": {
        "interval_ms": 100,
        "growth_rate": 2,
        "max_retries": 3,
      }
    }
  end;

  define connector read_file from file
  with codec = "json", preprocessors = ["separate"], config = {"path": "in.log", "mode": "read"}
  end;
  create connector data_in from read_file;
  create connector otelc from otel_client;
  create pipeline replay from pipelines::passthrough;

  connect /connector/data_in to /pipeline/replay;
  connect /pipeline/replay to /connector/otelc;
end;

define flow otel
flow
  use tremor::pipelines;
  use std::time::nanos;

  define connector otel_c from otel_client
  with
    config = {
      "url": "127.0.0.1:4317"
    }
  end;
  create connector otel_c;

  define connector input from cb
  with
    codec = "json",
    config = {
      "path": "in.json",
      "timeout": nanos::from_seconds(1)
    }
  end;
  create connector input;

  create pipeline passthrough from pipelines::passthrough;

  connect /connector/input to /pipeline/passthrough;
  connect /pipeline/passthrough to /connector/otel_c;

end;

deploy flow server;
deploy flow client;
deploy flow otel
"""


def test_tremors_otel_integration_flows_compile() -> None:
    flows = compile_source(TREMOR_OTEL, "config.troy").flows
    kinds = {alias: c.kind for f in flows.values() for alias, c in f.connectors.items()}
    assert (kinds["otels"], kinds["otelc"], kinds["otel_c"]) == ("otel_server", "otel_client", "otel_client")
