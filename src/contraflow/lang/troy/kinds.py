"""The connector kinds, codecs and processors Troy accepts, checked at compile time."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from contraflow import codecs
from contraflow.user_modules import installed_kinds


@dataclass(frozen=True)
class ConnectorKind:
    """A connector kind and the ports events can leave (`outputs`) or enter (`inputs`) it by."""

    name: str
    outputs: tuple[str, ...] = ("out", "err")
    inputs: tuple[str, ...] = ("in",)


# The built-in kinds, by the ports they have. Most take events in by `in` and send them on by `out`
# (`err` for what fails); a source takes nothing in; a sink sends nothing on but its errors.
_IN_AND_OUT = (
    "file",
    "null",
    "bench",
    "log",
    "tcp_server",
    "tcp_client",
    "http_server",
    "http_client",
    "ws_server",
    "ws_client",
    "unix_socket_server",
    "unix_socket_client",
    "cb",
    "metrics",
    "kv",
    "wal",
    "dns_client",
    "python",  # the class is the flow's own: `config = {"class": "MODULE:CLASS"}`
)
_SOURCES = ("metronome", "udp_server", "kafka_consumer", "crononome", "s3_reader", "otel_server")
_SINKS = ("exit", "udp_client", "kafka_producer", "s3_streamer", "otel_client")

_BUILT_IN: dict[str, ConnectorKind] = {
    c.name: c
    for c in (
        ConnectorKind("stdio", inputs=("in", "stdout", "stderr")),
        *(ConnectorKind(name) for name in _IN_AND_OUT),
        *(ConnectorKind(name, inputs=()) for name in _SOURCES),
        *(ConnectorKind(name, outputs=("err",)) for name in _SINKS),
    )
}


# Tremor's kinds this build does not have: those that talk to a service it has no client for. A flow
# naming one is told so (and which kinds there are), rather than that the kind is unknown. Kind -> why.
UNAVAILABLE: dict[str, str] = {
    "elastic": "it needs an Elasticsearch cluster",
    "clickhouse": "it needs a ClickHouse server",
    "gbq_writer": "it needs Google BigQuery",
    "gcl_writer": "it needs Google Cloud Logging",
    "gcs_streamer": "it needs Google Cloud Storage",
    "gcs_writer": "it needs Google Cloud Storage",
    "gpubsub_consumer": "it needs Google Cloud Pub/Sub",
    "gpubsub_producer": "it needs Google Cloud Pub/Sub",
    "discord": "it needs the Discord API",
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

# The names the runtime builds (contraflow.codecs' registry), so Troy accepts exactly what runs.
CODECS = frozenset(codecs.CODECS)
PREPROCESSORS = frozenset(codecs.PREPROCESSORS)
POSTPROCESSORS = frozenset(codecs.POSTPROCESSORS)

# The keys a connector's `with` block may set.
CONNECTOR_PARAMS = frozenset(
    {"codec", "config", "preprocessors", "postprocessors", "reconnect", "metrics_interval_s"}
)
