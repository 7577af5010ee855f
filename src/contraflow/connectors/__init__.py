"""Connectors: one module per kind (`contraflow.connectors.<kind>`), registered with `@register`.

from contraflow.connectors import connector_class
cls = connector_class("file")          # imports contraflow.connectors.file
cls.check_config("out", {"path": "x", "mode": "append"})
"""

from contraflow.connectors.base import (
    ConnectionLost,
    Connector,
    ConnectorConfigError,
    ConnectorContext,
    ConnectorMetrics,
    DeliveryFailed,
    SinkEvent,
    SourceData,
    connector_class,
    register,
    registered_kinds,
)

__all__ = [
    "ConnectionLost",
    "Connector",
    "ConnectorConfigError",
    "ConnectorContext",
    "ConnectorMetrics",
    "DeliveryFailed",
    "SinkEvent",
    "SourceData",
    "connector_class",
    "register",
    "registered_kinds",
]
