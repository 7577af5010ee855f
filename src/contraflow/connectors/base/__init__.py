"""What connector kinds share: the connector interface (`connector`) and the helpers kinds build on.

The kinds themselves live one module each in `contraflow.connectors`; this
package holds nothing a user configures. The interface's names are
re-exported here, so `from contraflow.connectors.base import Connector` reads
as it always did.
"""

from contraflow.connectors.base.connector import (
    ConnectionLost,
    Connector,
    ConnectorConfigError,
    ConnectorContext,
    ConnectorMetrics,
    DeliveryFailed,
    SinkBytes,
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
    "SinkBytes",
    "SinkEvent",
    "SourceData",
    "connector_class",
    "register",
    "registered_kinds",
]
