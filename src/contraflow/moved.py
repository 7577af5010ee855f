"""Modules that moved, and the import hook that keeps their old paths working.

The layout changed (one home per concept, docs/architecture.md); code written
against an old path still imports: `import contraflow.runtime.pipelines`
returns the very module now at `contraflow.pipeline.spark.run` (same object,
so monkeypatching either name patches both) and warns once with a
`DeprecationWarning` naming the new path. This table is the record of every
move.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

# old module path -> where it lives now
MOVED: dict[str, str] = {
    "contraflow.pipeline.spark_columns": "contraflow.pipeline.spark.columns",
    "contraflow.pipeline.spark_envelopes": "contraflow.pipeline.spark.envelopes",
    "contraflow.pipeline.spark_local": "contraflow.pipeline.spark.local",
    "contraflow.pipeline.spark_plan": "contraflow.pipeline.spark.plan",
    "contraflow.pipeline.spark_query": "contraflow.pipeline.spark.query",
    "contraflow.pipeline.spark_state": "contraflow.pipeline.spark.state",
    "contraflow.pipeline.spark_stateful": "contraflow.pipeline.spark.stateful",
    "contraflow.pipeline.spark_stateless": "contraflow.pipeline.spark.stateless",
    "contraflow.pipeline.split": "contraflow.pipeline.spark.split",
    "contraflow.pipeline.keying": "contraflow.pipeline.spark.keying",
    "contraflow.runtime.listener": "contraflow.pipeline.spark.listener",
    "contraflow.runtime.pipelines": "contraflow.pipeline.spark.run",
    "contraflow.spu.storage.batch": "contraflow.spu.protocol.batch",
    "contraflow.spu.storage.compression": "contraflow.spu.protocol.compression",
    "contraflow.spu.ledger": "contraflow.spu.server.ledger",
    "contraflow.spu.transactions": "contraflow.spu.server.transactions",
    "contraflow.api.metrics": "contraflow.runtime.metrics",
    "contraflow.connectors.kafka_options": "contraflow.connectors.base.kafka_options",
    "contraflow.connectors.acks": "contraflow.connectors.base.acks",
    "contraflow.connectors.asgiserver": "contraflow.connectors.base.asgiserver",
    "contraflow.connectors.checkpoint": "contraflow.connectors.base.checkpoint",
    "contraflow.connectors.filereader": "contraflow.connectors.base.filereader",
    "contraflow.connectors.histogram": "contraflow.connectors.base.histogram",
    "contraflow.connectors.inbox": "contraflow.connectors.base.inbox",
    "contraflow.connectors.logtail": "contraflow.connectors.base.logtail",
    "contraflow.connectors.netaddr": "contraflow.connectors.base.netaddr",
    "contraflow.connectors.options": "contraflow.connectors.base.options",
    "contraflow.connectors.sockets": "contraflow.connectors.base.sockets",
    "contraflow.connectors.timing": "contraflow.connectors.base.timing",
    "contraflow.connectors.undelivered": "contraflow.connectors.base.undelivered",
    "contraflow.codecs.processor": "contraflow.codecs.processors.processor",
    "contraflow.codecs.chain": "contraflow.codecs.processors.chain",
    "contraflow.codecs.base64_processor": "contraflow.codecs.processors.base64_processor",
    "contraflow.codecs.compress": "contraflow.codecs.processors.compress",
    "contraflow.codecs.compression": "contraflow.codecs.processors.compress",
    "contraflow.codecs.processors.compression": "contraflow.codecs.processors.compress",
    "contraflow.codecs.length_prefixed": "contraflow.codecs.processors.length_prefixed",
    "contraflow.codecs.remove_empty": "contraflow.codecs.processors.remove_empty",
    "contraflow.codecs.separate": "contraflow.codecs.processors.separate",
    "contraflow.codecs.textual_length_prefixed": "contraflow.codecs.processors.textual_length_prefixed",
}


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new path."""

    def __init__(self, old: str, new: str) -> None:
        self.old = old
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{self.old} moved to {self.new}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path is already executed."""


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths listed in `MOVED` (and only those)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(fullname, new))


def install() -> None:
    """Put the finder on `sys.meta_path` once (contraflow's `__init__` does)."""
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedFinder())
