"""Connectors: one module per kind (`contraflow.connectors.<kind>`), registered with `@register`.

from contraflow.connectors import connector_class
cls = connector_class("file")          # imports contraflow.connectors.file
cls.check_config("out", {"path": "x", "mode": "append"})
"""

# The connector interface, as `contraflow.connectors.base` exports it (one list of names, there).
from contraflow.connectors.base import *  # noqa: F403
from contraflow.connectors.base import __all__ as __all__
