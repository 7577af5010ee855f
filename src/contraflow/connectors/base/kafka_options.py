"""Config shared by `kafka_consumer` and `kafka_producer`: Tremor's names, librdkafka's settings.

`brokers` is a list of `host:port` strings (Tremor's spelling); `rdkafka_options`
passes librdkafka settings through unchanged (values as strings, numbers or
booleans), after the connector's own defaults so a user can override them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contraflow.connectors.base.connector import ConnectorContext
from contraflow.connectors.base.options import ConfigReader


def brokers(cfg: ConfigReader) -> str:
    """`brokers` as librdkafka's `bootstrap.servers`."""
    value = cfg.config.get("brokers")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(b, str) and ":" in b for b in value):
        raise cfg.error("brokers", f"must be a list of 'host:port' strings, got {value!r}")
    return ",".join(value)


def rdkafka_options(
    cfg: ConfigReader, options: Mapping[str, Any], key: str = "rdkafka_options"
) -> dict[str, str]:
    """librdkafka settings as the strings librdkafka takes (booleans as true/false)."""
    if not isinstance(options, Mapping):
        raise cfg.error(key, f"must be a record of librdkafka settings, got {options!r}")
    settings: dict[str, str] = {}
    for name, value in options.items():
        if isinstance(value, bool):
            settings[name] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            settings[name] = str(value)
        else:
            raise cfg.error(key, f"setting '{name}' must be a string, number or boolean, got {value!r}")
    return settings


def client_id(ctx: ConnectorContext) -> dict[str, str]:
    """librdkafka's `client.id`, how the SPU (or a Kafka broker) names this client in its logs and member ids.

    Named after the flow and alias; settings from the config go on top of it.
    """
    return {"client.id": f"contraflow.{ctx.flow_id}.{ctx.alias}"}
