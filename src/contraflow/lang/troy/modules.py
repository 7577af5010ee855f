"""Finding the modules a `use` names: built-ins, the file's directory, $CONTRAFLOW_PATH, then
Tremor's library modules written in tremor-script (`cncf::otel::...`).

`use a::b::c;` looks for `a/b/c.troy` (also `.tremor`, `.trickle`) in each
search directory, in order. A module is compiled once per compilation, however
many files use it; a module using itself, directly or not, is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from contraflow.lang.errors import LangError, SourceText
from contraflow.lang.script.modules import LIBRARY_DIR
from contraflow.lang.trickle.ast import ModPath
from contraflow.lang.trickle.scope import ModuleLoader, Scope
from contraflow.lang.troy.builtins import BUILTIN_MODULES

MODULE_SUFFIXES = (".troy", ".tremor", ".trickle")

# Compiles a module's source into its scope; `loader` resolves the module's own `use`s.
ModuleCompiler = Callable[[SourceText, ModuleLoader], Scope]


class Modules:
    """Module resolution and the cache of compiled modules for one compilation."""

    def __init__(self, search_path: list[Path], compile_module: ModuleCompiler) -> None:
        self.search_path = search_path
        self._compile = compile_module
        self._cache: dict[str, Scope] = {}
        self._loading: set[str] = set()

    def loader_for(self, directory: Path) -> ModuleLoader:
        """The `use` resolver for a file in `directory` (its own directory is searched first)."""

        def load(path: ModPath) -> Scope | None:
            return self.load(path, directory)

        return load

    def find(self, path: ModPath, directory: Path) -> Path | None:
        relative = Path(*(p.value for p in path.parts))
        for base in [directory, *self.search_path, LIBRARY_DIR]:
            for suffix in MODULE_SUFFIXES:
                candidate = base / relative.with_suffix(suffix)
                if candidate.is_file():
                    return candidate.resolve()
        return None

    def load(self, path: ModPath, directory: Path) -> Scope | None:
        key = tuple(p.value for p in path.parts)
        if key in BUILTIN_MODULES:
            return self._compiled(f"<builtin {path.text}>", BUILTIN_MODULES[key], directory, path)
        found = self.find(path, directory)
        if found is None:
            return None
        return self._compiled(str(found), found.read_text(encoding="utf-8"), found.parent, path)

    def _compiled(self, name: str, text: str, directory: Path, path: ModPath) -> Scope:
        if name in self._cache:
            return self._cache[name]
        if name in self._loading:
            raise LangError(
                f"module '{path.text}' uses itself (cyclic `use`)",
                path.pos,
                None,
                "break the cycle by moving the shared definitions into a third module",
            )
        self._loading.add(name)
        try:
            scope = self._compile(SourceText(name, text), self.loader_for(directory))
        finally:
            self._loading.discard(name)
        self._cache[name] = scope
        return scope
