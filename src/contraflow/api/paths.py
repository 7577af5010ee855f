"""Which files a flow deployed through the API may touch (`--allow-path DIR`).

Connectors that read or write files name them in their config; a flow
deployed over the API must keep every such path inside an allowed directory
(by default the runtime's working directory and data directory), so reaching
the API does not mean reaching every file the runtime can open.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from contraflow.lang.graph import Deployment
from contraflow.pipeline.python.modules import python_operators

# connector kind -> config keys that name a file it opens
FILE_KEYS: dict[str, tuple[str, ...]] = {"file": ("path",), "bench": ("path", "source")}

# Why a flow deployed over the API may not run the user's Python code (connector kinds written
# outside contraflow: `python`, installed packages' entry points; `python::map`/`python::batch`
# operators) while paths are restricted: the policy cannot know which files that code opens, and
# it could import a module a `file` sink just wrote.
PLUGINS_UNDER_PATH_POLICY = (
    "flows deployed over the API may not run Python code (connectors or operators) while "
    "--allow-path restricts files (it could reach any file); give the flow to `contraflow run FILE` instead"
)


@dataclass(frozen=True)
class PathRefusal:
    flow: str
    connector: str
    path: Path

    def __str__(self) -> str:
        return (
            f"flow '{self.flow}': connector '{self.connector}' may not use {self.path}: "
            "it is outside the allowed directories (--allow-path)"
        )


class PathPolicy:
    """Allowed directories, resolved once (symlinks too, so a link cannot lead out)."""

    def __init__(self, allowed: Iterable[Path], base: Path | None = None) -> None:
        self.base = (base or Path.cwd()).resolve()
        self.allowed = [self._resolve(Path(p)) for p in allowed]

    def _resolve(self, path: Path) -> Path:
        return (self.base / path.expanduser()).resolve()

    def allows(self, path: Path) -> bool:
        target = self._resolve(path)
        return any(target.is_relative_to(root) for root in self.allowed)

    def refusals(self, deployment: Deployment) -> list[PathRefusal]:
        return [r for r in _file_uses(deployment) if not self.allows(r.path)]


def python_operators_in(deployment: Deployment) -> list[str]:
    """`flow/pipeline: operator` for each Python operator of the deployment (refused under the policy)."""
    return [
        f"{flow_id}/{name}: {spec.definition} ({spec.kind})"
        for flow_id, graph in deployment.flows.items()
        for name, pipeline in graph.pipelines.items()
        for spec in python_operators(pipeline)
    ]


def _file_uses(deployment: Deployment) -> Iterator[PathRefusal]:
    for flow_id, graph in deployment.flows.items():
        for alias, spec in graph.connectors.items():
            for key in FILE_KEYS.get(spec.kind, ()):
                value = spec.config.get(key)
                if isinstance(value, str):
                    yield PathRefusal(flow_id, alias, Path(value))
