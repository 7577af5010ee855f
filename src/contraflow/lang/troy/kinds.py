"""The connector kinds, codecs and processors Troy accepts, checked at compile time."""

from __future__ import annotations

from dataclasses import dataclass


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

CONNECTORS: dict[str, ConnectorKind] = {
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
    )
}

CODECS = frozenset({"json", "string", "binary", "msgpack", "csv", "yaml"})
PREPROCESSORS = frozenset({"separate", "length-prefixed", "base64", "decompress"})
POSTPROCESSORS = frozenset({"separate", "length-prefixed", "base64", "compress"})

# The keys a connector's `with` block may set.
CONNECTOR_PARAMS = frozenset(
    {"codec", "config", "preprocessors", "postprocessors", "reconnect", "metrics_interval_s"}
)
