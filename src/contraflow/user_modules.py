"""Importing the user's own Python modules named in a flow: next to the flow file, on $CONTRAFLOW_PATH, on sys.path.

A module a flow names (a `python` connector's class) is looked up the way a
Troy `use` is: the flow file's directory first, then each directory of
CONTRAFLOW_PATH, then Python's own `sys.path` (installed packages). A module
found in a directory is loaded from there, and the directory is added to the
end of `sys.path` so that its own imports of its neighbours work; at the end,
not the front, so a file next to a flow (`json.py`, `email.py`) never shadows
a module the runtime imports later. Python keeps one module per name in a
process: a module already imported is used as it is.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from contraflow.errors import UserError

# The entry point group that names connector kinds packages add (name = kind, value = "MOD:CLASS").
ENTRY_POINT_GROUP = "contraflow.connectors"


class UserModuleNotFound(UserError):
    """No module of that name in any directory searched (a module that imports something missing is not this)."""

    def __init__(self, name: str, searched: list[Path]) -> None:
        where = ", ".join(str(d) for d in searched) or "no directory"
        super().__init__(f"module '{name}' not found (searched {where}, then sys.path)")
        self.name = name
        self.searched = searched


def search_path_from_env() -> list[Path]:
    """Directories in $CONTRAFLOW_PATH (separated by ':'), empty entries ignored: the one reader of it."""
    raw = os.environ.get("CONTRAFLOW_PATH", "")
    return [Path(p) for p in raw.split(os.pathsep) if p]


def installed_kinds() -> list[str]:
    """The connector kinds installed packages declare, read from their metadata (nothing is imported).

    Read on every call: a package installed while the runtime runs is found by the next deploy.
    """
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})


def search_directories(directory: Path | None) -> list[Path]:
    """Where a flow's modules are looked up before sys.path: the flow file's directory, then CONTRAFLOW_PATH."""
    found = [directory] if directory is not None else []
    return [*found, *search_path_from_env()]


def find_user_module(top: str, searched: Sequence[Path]) -> importlib.machinery.ModuleSpec | None:
    """Where top-level module `top` is in the first of `searched` that has it (None: in none of them)."""
    importlib.invalidate_caches()  # a file written since the directory was last listed is seen
    for base in searched:
        spec = importlib.machinery.PathFinder.find_spec(top, [str(base)])
        if spec is not None:
            return spec
    return None


def import_user_module(name: str, searched: Sequence[Path]) -> ModuleType:
    """Import module `name` (dotted names allowed) from the first of `searched` that has it, else sys.path.

    The directory it came from goes to the *end* of sys.path (its own imports
    resolve, and a file next to a flow cannot shadow the standard library).
    Raises `UserModuleNotFound` when no directory nor sys.path has it; any
    error the module raises while it is imported propagates unchanged.
    """
    if name in sys.modules:
        return sys.modules[name]
    top = name.partition(".")[0]
    if top not in sys.modules:
        spec = find_user_module(top, searched)
        if spec is not None and spec.origin is not None:
            _add_to_sys_path(_root_of(top, spec))
            _load(top, spec)
    try:
        return importlib.import_module(name)  # a package's submodule, or a module from sys.path
    except ModuleNotFoundError as err:
        if err.name is not None and (name == err.name or name.startswith(f"{err.name}.")):
            raise UserModuleNotFound(name, list(searched)) from None
        raise


def _root_of(top: str, spec: importlib.machinery.ModuleSpec) -> Path:
    """The directory holding module or package `top`."""
    origin = Path(str(spec.origin)).resolve()
    return origin.parent.parent if spec.submodule_search_locations else origin.parent


def _load(name: str, spec: importlib.machinery.ModuleSpec) -> None:
    """Load top-level module `name` from `spec` as `import` would (in sys.modules while it runs)."""
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        assert spec.loader is not None
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def _add_to_sys_path(directory: Path) -> None:
    entry = str(directory.resolve())
    if entry not in sys.path:
        sys.path.append(entry)
