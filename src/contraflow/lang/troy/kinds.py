"""The connector kinds, codecs and processors Troy accepts, checked at compile time."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from contraflow.user_modules import installed_kinds


@dataclass(frozen=True)
class ConnectorKind:
    """A connector kind and the ports events can leave (`outputs`) or enter (`inputs`) it by."""

    name: str
    outputs: tuple[str, ...] = ("out", "err")
    inputs: tuple[str, ...] = ("in",)
    # Reserved: the name is known and checks pass, but the runtime may not ship it yet.
    reserved: bool = False


_SOURCE_ONLY: tuple[str, ...] = ()
_NO_OUTPUT: tuple[str, ...] = ("err",)

_BUILT_IN: dict[str, ConnectorKind] = {
    c.name: c
    for c in (
        ConnectorKind("stdio", inputs=("in", "stdout", "stderr")),
        ConnectorKind("file"),
        ConnectorKind("metronome", inputs=_SOURCE_ONLY),
        ConnectorKind("exit", outputs=_NO_OUTPUT),
        ConnectorKind("null"),
        ConnectorKind("bench"),
        ConnectorKind("log"),
        ConnectorKind("tcp_server"),
        ConnectorKind("tcp_client"),
        ConnectorKind("udp_server", inputs=_SOURCE_ONLY),
        ConnectorKind("udp_client", outputs=_NO_OUTPUT),
        ConnectorKind("http_server"),
        ConnectorKind("http_client"),
        ConnectorKind("kafka_consumer", inputs=_SOURCE_ONLY),
        ConnectorKind("kafka_producer", outputs=_NO_OUTPUT),
        ConnectorKind("cb"),
        ConnectorKind("crononome", inputs=_SOURCE_ONLY),
        ConnectorKind("metrics"),
        ConnectorKind("kv"),
        ConnectorKind("wal"),
        ConnectorKind("dns_client"),
        ConnectorKind("python"),  # the class is the flow's own: `config = {"class": "MODULE:CLASS"}`
    )
}


# Tremor's kinds that talk to a service this build has no client or peer for: a flow naming one is
# told so (and which kinds there are), rather than that the kind is unknown. Kind -> what it needs.
UNAVAILABLE: dict[str, str] = {
    "elastic": "an Elasticsearch cluster",
    "clickhouse": "a ClickHouse server",
    "gbq_writer": "Google BigQuery",
    "gcl_writer": "Google Cloud Logging",
    "gcs_streamer": "Google Cloud Storage",
    "gcs_writer": "Google Cloud Storage",
    "gpubsub_consumer": "Google Cloud Pub/Sub",
    "gpubsub_producer": "Google Cloud Pub/Sub",
    "discord": "the Discord API",
    "otel_client": "an OpenTelemetry collector (OTLP over gRPC)",
    "otel_server": "OTLP over gRPC",
    "s3_reader": "Amazon S3",
    "s3_streamer": "Amazon S3",
}


class _ConnectorKinds(Mapping[str, ConnectorKind]):
    """The built-in kinds, then those installed packages declare by entry point (ports `in`, `out`,
    `err`), read when a name is not built in: a package installed after start is found."""

    def __getitem__(self, name: str) -> ConnectorKind:
        if name in _BUILT_IN:
            return _BUILT_IN[name]
        if name in _installed():
            return ConnectorKind(name)
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter([*_BUILT_IN, *(name for name in _installed() if name not in _BUILT_IN)])

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _installed() -> list[str]:
    return installed_kinds()


CONNECTORS: Mapping[str, ConnectorKind] = _ConnectorKinds()

CODECS = frozenset({"json", "json-sorted", "string", "binary", "msgpack", "csv", "yaml"})
PREPROCESSORS = frozenset(
    {
        "separate",
        "lines",
        "length-prefixed",
        "textual-length-prefixed",
        "base64",
        "decompress",
        "remove-empty",
    }
)
POSTPROCESSORS = frozenset(
    {"separate", "lines", "length-prefixed", "textual-length-prefixed", "base64", "compress"}
)

# The keys a connector's `with` block may set.
CONNECTOR_PARAMS = frozenset(
    {"codec", "config", "preprocessors", "postprocessors", "reconnect", "metrics_interval_s"}
)
