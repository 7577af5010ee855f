"""The real peers of the otel connectors' tests: the OpenTelemetry SDK's telemetry and OTLP/gRPC
exporters, and a collector made of opentelemetry-proto's own generated servicers served by grpcio."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import Message
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

RESOURCE = Resource.create({"service.name": "checkout"})


@dataclass
class Telemetry:
    """What the SDK recorded: its own objects (for its exporters) and the requests it encodes them to."""

    spans: Any
    logs: Any
    metrics: Any

    def requests(self) -> dict[str, Message]:
        """Signal key -> the export request the SDK's exporter sends for it."""
        return {
            "trace": encode_spans(self.spans),
            "logs": encode_logs(self.logs),
            "metrics": encode_metrics(self.metrics),
        }


def record_telemetry() -> Telemetry:
    """Two nested spans, a warning log line, a counter and a histogram, as an application makes them."""
    spans = InMemorySpanExporter()
    tracers = TracerProvider(resource=RESOURCE)
    tracers.add_span_processor(SimpleSpanProcessor(spans))
    tracer = tracers.get_tracer("shop", "1.2")
    with (
        tracer.start_as_current_span("order", attributes={"http.target": "/order", "items": 3}),
        tracer.start_as_current_span("payment", attributes={"amounts": [1.5, 2.5]}),
    ):
        pass

    logs = InMemoryLogRecordExporter()
    loggers = LoggerProvider(resource=RESOURCE)
    loggers.add_log_record_processor(SimpleLogRecordProcessor(logs))
    loggers.get_logger("shop").emit(
        severity_number=SeverityNumber.WARN,
        severity_text="WARN",
        body="disk full",
        attributes={"disk": "/var", "free": 0.5},
    )

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader], resource=RESOURCE)
    meter = meters.get_meter("shop")
    meter.create_counter("orders").add(2, {"region": "eu"})
    meter.create_histogram("latency", unit="ms").record(12.5)
    metrics = reader.get_metrics_data()
    meters.shutdown()
    return Telemetry(spans.get_finished_spans(), logs.get_finished_logs(), metrics)


def export(telemetry: Telemetry, port: int, key: str) -> str:
    """Send one signal's telemetry with the SDK's OTLP/gRPC exporter (blocking); the result's name.

    The deadline is a minute: through a flow, an export waits for the pipeline's micro-batch,
    seconds on a loaded machine, and a sender whose deadline passes counts a failure."""
    endpoint = f"127.0.0.1:{port}"
    exporter: Any
    if key == "trace":
        exporter, data = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=60), telemetry.spans
    elif key == "logs":
        exporter, data = OTLPLogExporter(endpoint=endpoint, insecure=True, timeout=60), telemetry.logs
    else:
        exporter, data = OTLPMetricExporter(endpoint=endpoint, insecure=True, timeout=60), telemetry.metrics
    try:
        return str(exporter.export(data).name)
    finally:
        exporter.shutdown()


def export_all(telemetry: Telemetry, port: int) -> list[str]:
    """Traces, logs, then metrics, each export waiting for its answer before the next."""
    return [export(telemetry, port, key) for key in ("trace", "logs", "metrics")]


@dataclass
class Collector:
    """The collector side: opentelemetry-proto's generated servicers, recording each request.

    `refuse` makes an export whose request holds that span name (or log body) fail with
    INVALID_ARGUMENT, as a collector refusing data does."""

    received: list[tuple[str, Message]] = field(default_factory=list)
    refuse: str | None = None
    server: grpc.aio.Server | None = None
    port: int = 0

    async def start(self, port: int = 0) -> int:
        server = grpc.aio.server()
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(
            _servicer(
                logs_service_pb2_grpc.LogsServiceServicer,
                "logs",
                logs_service_pb2.ExportLogsServiceResponse,
                self,
            ),
            server,
        )
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
            _servicer(
                metrics_service_pb2_grpc.MetricsServiceServicer,
                "metrics",
                metrics_service_pb2.ExportMetricsServiceResponse,
                self,
            ),
            server,
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
            _servicer(
                trace_service_pb2_grpc.TraceServiceServicer,
                "trace",
                trace_service_pb2.ExportTraceServiceResponse,
                self,
            ),
            server,
        )
        self.port = server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        self.server = server
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            server, self.server = self.server, None
            await server.stop(None)

    async def record(self, key: str, request: Message, context: grpc.aio.ServicerContext) -> None:
        if self.refuse is not None and self.refuse in str(request):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"refused: {self.refuse}")
        self.received.append((key, request))


def _servicer(base: type, key: str, response: type[Message], collector: Collector) -> Any:
    """An instance of the generated servicer `base` whose `Export` records into `collector`."""

    class Recording(base):  # type: ignore[misc, valid-type]
        async def Export(self, request: Any, context: Any) -> Any:  # noqa: N802
            await collector.record(key, request, context)
            return response()

    return Recording()
