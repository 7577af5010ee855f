"""Old module paths a contract promised would keep importing, and the import hook that does it.

`import contraflow.codecs.compression` returns the very module now at
`contraflow.codecs.processors.compress` (same object, so monkeypatching either
name patches both) and warns once with a `DeprecationWarning` naming the new
path. Every other move is only documented (docs/architecture.md, "Moved
modules"): nothing in contraflow, its tests or its docs imported those old
paths any more, so they were dropped from here.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

# old module path -> where it lives now. Each stays because issue 12 ("one
# compression implementation") promised that these old compression paths keep
# working through this hook.
MOVED: dict[str, str] = {
    "contraflow.codecs.compression": "contraflow.codecs.processors.compress",
    "contraflow.codecs.processors.compression": "contraflow.codecs.processors.compress",
    "contraflow.spu.storage.compression": "contraflow.spu.protocol.compression",
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
