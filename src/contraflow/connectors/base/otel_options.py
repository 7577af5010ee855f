"""What `otel_server` and `otel_client` share: Tremor's config, the endpoint and which signals are on.

`url` is `"host:port"` or `"scheme://host:port"` (default `localhost:4317`, OTLP/gRPC's
port, which is also the port when the url names none); `logs`, `metrics`, `trace`
(default true) switch each signal's service on or off; `compression` (`"none"`, `"gzip"`)
is how the messages this end sends are compressed (gRPC's own compression: the other end reads
either).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from contraflow.connectors.base import Connector
from contraflow.connectors.base.netaddr import Endpoint, endpoint
from contraflow.connectors.base.options import ConfigReader
from contraflow.connectors.base.otlp import SIGNALS, Signal

OTLP_GRPC_PORT = 4317
COMPRESSIONS = {"none": grpc.Compression.NoCompression, "gzip": grpc.Compression.Gzip}


@dataclass(frozen=True)
class OtelOptions:
    url: Endpoint
    signals: tuple[Signal, ...]  # the signals switched on, in SIGNALS' order
    compression: grpc.Compression


class OtelConnector(Connector[OtelOptions]):
    """The base of both OTLP/gRPC kinds: the same config, events in Tremor's otel shape."""

    config_keys = frozenset({"url", "logs", "metrics", "trace", "compression"})
    structured = True

    @classmethod
    def read_options(cls, cfg: ConfigReader) -> OtelOptions:
        url = endpoint(cfg, scheme="http", default=f"localhost:{OTLP_GRPC_PORT}", port=OTLP_GRPC_PORT)
        signals = tuple(s for s in SIGNALS if cfg.boolean(s.key, True))
        return OtelOptions(url, signals, COMPRESSIONS[cfg.choice("compression", COMPRESSIONS, "none")])
