"""Importing the user's own Python modules named in a flow: next to the flow file, on $CONTRAFLOW_PATH, on sys.path.

A module a flow names (a `python` connector's class) is looked up the way a
Troy `use` is: the flow file's directory first, then each directory of
CONTRAFLOW_PATH, then Python's own `sys.path` (installed packages). The
directory a module is found in goes to the front of `sys.path`, once, so that
the module's own imports of its neighbours work as they do when it is run by
hand. Python keeps one module per name in a process: a module already
imported is used as it is.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from pathlib import Path
from types import ModuleType

from contraflow.errors import UserError


class UserModuleNotFound(UserError):
    """No module of that name in any directory searched (a module that imports something missing is not this)."""

    def __init__(self, name: str, searched: list[Path]) -> None:
        where = ", ".join(str(d) for d in searched) or "no directory"
        super().__init__(f"module '{name}' not found (searched {where}, then sys.path)")
        self.name = name
        self.searched = searched


def search_directories(directory: Path | None) -> list[Path]:
    """Where a flow's modules are looked up before sys.path: the flow file's directory, then CONTRAFLOW_PATH."""
    from contraflow.lang.troy.modules import search_path_from_env  # the one reader of $CONTRAFLOW_PATH

    found = [directory] if directory is not None else []
    return [*found, *search_path_from_env()]


def import_user_module(name: str, directory: Path | None) -> ModuleType:
    """Import module `name` (dotted names allowed) for a flow whose file is in `directory`.

    Raises `UserModuleNotFound` when no directory nor sys.path has it; any
    error the module raises while it is imported propagates unchanged.
    """
    if name in sys.modules:
        return sys.modules[name]
    searched = search_directories(directory)
    importlib.invalidate_caches()  # a file written since the directory was last listed is seen
    top = name.partition(".")[0]
    for base in searched:
        if importlib.machinery.PathFinder.find_spec(top, [str(base)]) is not None:
            _put_first_on_sys_path(base)
            break
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name is not None and (name == err.name or name.startswith(f"{err.name}.")):
            raise UserModuleNotFound(name, searched) from None
        raise


def _put_first_on_sys_path(directory: Path) -> None:
    entry = str(directory.resolve())
    if entry in sys.path:
        sys.path.remove(entry)
    sys.path.insert(0, entry)
