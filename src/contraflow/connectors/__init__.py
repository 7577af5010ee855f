"""Connectors: one module per built-in kind (`contraflow.connectors.<kind>`), and the public connector API.

The stable public API, for connector kinds written outside contraflow
(docs/python.md, "Connectors written in Python"): `Connector` (the base class: `pull`/`resume`/
`ack`/`fail` for a source, `connect`/`send` for a sink), its data types
`SourceData`, `SinkEvent`, `SinkBytes`, `ConnectorContext`, `ConnectorMetrics`,
and the errors `ConnectionLost`, `DeliveryFailed`, `ConnectorConfigError`,
`ConnectorError`; `ENTRY_POINT_GROUP` names the entry point group packages
declare kinds in. The registry functions below them are contraflow's own.

from contraflow.connectors import connector_class
cls = connector_class("file")          # imports contraflow.connectors.file
cls.check_config("out", {"path": "x", "mode": "append"})
"""

# The connector interface, as `contraflow.connectors.base` exports it (one list of names, there).
from contraflow.connectors.base import *  # noqa: F403
from contraflow.connectors.base import __all__ as __all__
