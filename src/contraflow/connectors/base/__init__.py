"""What connector kinds share: the connector interface (`connector`), the registry of kinds (`registry`)
and the helpers kinds build on.

The kinds themselves live one module each in `contraflow.connectors`; this
package holds nothing a user configures. The interface's names are
re-exported here, so `from contraflow.connectors.base import Connector` reads
as it always did.
"""

from contraflow.connectors.base.connector import (
    ConnectionLost,
    Connector,
    ConnectorContext,
    ConnectorError,
    ConnectorMetrics,
    DeliveryFailed,
    SinkBytes,
    SinkEvent,
    SourceData,
    reason_of,
)
from contraflow.connectors.base.options import ConnectorConfigError
from contraflow.connectors.base.registry import (
    check_connector,
    connector_class,
    connector_for,
    plugins_refused,
    register,
    registered_kinds,
)
from contraflow.user_modules import ENTRY_POINT_GROUP, installed_kinds

__all__ = [
    "ENTRY_POINT_GROUP",
    "ConnectionLost",
    "reason_of",
    "Connector",
    "ConnectorConfigError",
    "ConnectorContext",
    "ConnectorError",
    "ConnectorMetrics",
    "DeliveryFailed",
    "SinkBytes",
    "SinkEvent",
    "SourceData",
    "check_connector",
    "connector_class",
    "connector_for",
    "installed_kinds",
    "plugins_refused",
    "reason_of",
    "register",
    "registered_kinds",
]
