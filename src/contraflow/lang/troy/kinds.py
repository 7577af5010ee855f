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
        ConnectorKind("ws_server"),
        ConnectorKind("ws_client"),
        ConnectorKind("unix_socket_server"),
        ConnectorKind("unix_socket_client"),
        ConnectorKind("kafka_consumer", inputs=_SOURCE_ONLY),
        ConnectorKind("kafka_producer", outputs=_NO_OUTPUT),
        ConnectorKind("cb"),
        ConnectorKind("crononome", inputs=_SOURCE_ONLY),
        ConnectorKind("metrics"),
        ConnectorKind("kv"),
        ConnectorKind("wal"),
        ConnectorKind("dns_client"),
        ConnectorKind("s3_reader", inputs=_SOURCE_ONLY),
        ConnectorKind("s3_streamer", outputs=_NO_OUTPUT),
        ConnectorKind("otel_server", inputs=_SOURCE_ONLY),
        ConnectorKind("otel_client", outputs=_NO_OUTPUT),
        ConnectorKind("python"),  # the class is the flow's own: `config = {"class": "MODULE:CLASS"}`
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
