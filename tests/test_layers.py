"""The layer order of src/contraflow, stated as data and checked on every import.

Every module belongs to one *unit* (the longest prefix below that names it).
A unit may import only units on lower layers: never one beside it, never one
above. Every import counts, wherever it is written: at module level, inside a
function, under `if TYPE_CHECKING:`, and lazily by name
(`importlib.import_module("contraflow...")`, or a `"contraflow.x:attr"`
string such as the command table of `contraflow.cli`). A function-level
import is still a dependency; it only hides it.

Two more rules: outside `contraflow.spu`, the SPU is seen only through its
client and its protocol (`contraflow.spu.client`, `contraflow.spu.protocol`);
the shell modules, which compose a whole process, may import anything.
docs/architecture.md states the same order in words.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Between top-level packages and modules, bottom layer first.
LAYERS: list[list[str]] = [
    ["contraflow.errors", "contraflow.moved"],
    ["contraflow"],  # the package: its version, and the hook that keeps old module paths importing
    [
        "contraflow.atomic_files",
        "contraflow.backoff",
        "contraflow.compression",
        "contraflow.control",
        "contraflow.discovery",
        "contraflow.events",
        "contraflow.heap",
        "contraflow.page_cache",
        "contraflow.preflight",
        "contraflow.process_output",
        "contraflow.security",
        "contraflow.stopping",
        "contraflow.units",
        "contraflow.user_modules",
    ],
    ["contraflow.asgi_server", "contraflow.foreground"],
    ["contraflow.spu"],
    ["contraflow.codecs"],
    ["contraflow.lang"],  # Troy checks codec names and configs; `influx||` reads the codec's line protocol
    ["contraflow.connectors"],
    ["contraflow.spark"],
    ["contraflow.pipeline"],
    ["contraflow.api.facade"],  # the types the runtime reports in, read by the API above it
    ["contraflow.runtime"],
    ["contraflow.api"],
]

# Inside contraflow.spu, bottom layer first. These units take the place of
# "contraflow.spu" above for imports between two SPU modules.
SPU_LAYERS: list[list[str]] = [
    ["contraflow.spu"],  # the package (a docstring)
    ["contraflow.spu.protocol"],  # what travels on the wire and the nouns both ends share; no I/O
    ["contraflow.spu.rpc"],  # the framed, multiplexed connection for both ends
    ["contraflow.spu.storage"],  # the log on disk and nothing else
    ["contraflow.spu.client"],  # talking to SPUs
    ["contraflow.spu.api", "contraflow.spu.controller"],  # a log client, local or remote; the SC
    ["contraflow.spu.node.idempotence"],  # one SPU: the one producer table both protocols use
    ["contraflow.spu.node"],  # its partitions: the single door to the storage engine
    ["contraflow.spu.node.exactly_once"],  # its exactly-once commits, lone or per partition
    ["contraflow.spu.node.replication"],  # its replicas, leader and follower apart; its link to the SC
    ["contraflow.spu.node.membership"],  # alone or in a cluster, chosen once at start
    ["contraflow.spu.server", "contraflow.spu.kafka", "contraflow.spu.registry"],  # the doors onto the node
    ["contraflow.spu.app"],  # one SPU process: the node and its doors
    ["contraflow.spu.cli"],  # the log's commands: topic, produce, consume, spu run, sc run, cluster
    ["contraflow.spu.embedded"],  # an SPU owned by this process (a thread or a child)
]

# SPU units that may import only the few units named (besides what is outside the SPU):
# a client or the controller never reaches into an SPU's storage or node.
SPU_ONLY: dict[str, tuple[str, ...]] = {
    "contraflow.spu.protocol": (),
    "contraflow.spu.rpc": ("contraflow.spu.protocol",),
    "contraflow.spu.client": ("contraflow.spu.protocol", "contraflow.spu.rpc"),
    "contraflow.spu.controller": ("contraflow.spu.protocol", "contraflow.spu.rpc"),
}

# What the rest of contraflow may import of the SPU.
SPU_FACES = ("contraflow.spu.client", "contraflow.spu.protocol")

# The app shell: modules that compose a process from every layer, and so may import anything.
SHELL: dict[str, str] = {
    "contraflow.__main__": "`python -m contraflow`: the command group",
    "contraflow.cli": "the command group: imports each subcommand's module by name",
    "contraflow.run_command": "`contraflow run`: an SPU, a Spark session, the runtime and the API in one process",
    "contraflow.pipeline.commands": "`contraflow query` and `contraflow state`: a pipeline on its own",
    "contraflow.pipeline.spark.local": "`contraflow query`: an SPU of its own and a Spark session",
    "contraflow.spark.worker_daemon": "Spark's Python worker process: imports the task code before it forks",
}

# Imports that break the order today, each with why it stays and what removes it.
# The test fails when one of them is gone from the code, so the list only shrinks.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("contraflow.lang.troy.connectors", "contraflow.connectors.base"): "Troy asks the connector kind to "
    "check `config` so the error points into the source; goes when kinds hand their checks to the compiler",
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} imports {self.imported}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _is_module(dotted: str) -> bool:
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _lazy_target(node: ast.AST) -> str | None:
    """A module imported by name: `import_module("contraflow.x")` or a `"contraflow.x:attr"` string."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        if name == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
            value = node.args[0].value
            return value if isinstance(value, str) and value.startswith("contraflow.") else None
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("contraflow.")
    ):
        module, colon, attr = node.value.partition(":")
        if colon and attr.isidentifier() and _is_module(module):
            return module
    return None


def imports_of(path: Path) -> list[Import]:
    """Every contraflow module the file at `path` imports."""
    importer = _module_name(path)
    return imports_in(path.read_text(), importer, importer if path.name == "__init__.py" else None)


def imports_in(source: str, importer: str, package: str | None = None) -> list[Import]:
    """Every contraflow module `source` (the module `importer`) imports, wherever the import is written."""
    package = package or importer.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(ast.parse(source, importer)):
        kind = type(node)
        if kind is ast.Import:
            assert isinstance(node, ast.Import)
            targets = [alias.name for alias in node.names]
        elif kind is ast.ImportFrom:
            assert isinstance(node, ast.ImportFrom)
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets = [
                f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base for alias in node.names
            ]
        elif (kind is ast.Call or kind is ast.Constant) and (lazy := _lazy_target(node)) is not None:
            targets = [lazy]
        else:
            continue
        found += [Import(importer, t, node.lineno) for t in targets if t.split(".")[0] == "contraflow"]
    return found


@cache
def all_imports() -> tuple[Import, ...]:
    return tuple(i for path in sorted((SRC / "contraflow").rglob("*.py")) for i in imports_of(path))


def _rank(layers: list[list[str]]) -> dict[str, int]:
    return {unit: level for level, units in enumerate(layers) for unit in units}


TOP_RANK = _rank(LAYERS)
SPU_RANK = _rank(SPU_LAYERS)


ROOTS = frozenset({"contraflow", "contraflow.spu"})  # units of their own module only, not of what is below


def _unit(module: str, ranks: dict[str, int]) -> str | None:
    if ranks is TOP_RANK and _in_spu(module):
        return "contraflow.spu"  # between top-level packages the SPU is one unit
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in ranks and (prefix not in ROOTS or prefix == module):
            return prefix
    return None


def _in_spu(module: str) -> bool:
    return module == "contraflow.spu" or module.startswith("contraflow.spu.")


def _shell(module: str) -> bool:
    return module in SHELL


def violation(imp: Import) -> str | None:
    """Why `imp` breaks the order, or None when it keeps it."""
    if _shell(imp.importer):
        return None
    if _in_spu(imp.importer) and _in_spu(imp.imported):
        ranks = SPU_RANK
    else:
        ranks = TOP_RANK
        if _in_spu(imp.imported) and not _in_spu(imp.importer) and not imp.imported.startswith(SPU_FACES):
            return "outside the SPU only spu.client and spu.protocol may be imported"
    if _shell(imp.imported):
        return "the shell is imported by nothing"
    here, there = _unit(imp.importer, ranks), _unit(imp.imported, ranks)
    if here is None or there is None:
        return f"{imp.importer if here is None else imp.imported} has no layer"
    if ranks is SPU_RANK and here in SPU_ONLY and there != here and there not in SPU_ONLY[here]:
        return f"{here} may import only {', '.join(SPU_ONLY[here]) or 'nothing else of the SPU'}"
    if here == there or ranks[there] < ranks[here]:
        return None
    return f"{here} (layer {ranks[here]}) may not import {there} (layer {ranks[there]})"


def test_every_module_has_a_layer() -> None:
    modules = [_module_name(path) for path in (SRC / "contraflow").rglob("*.py")]
    assert [
        m for m in modules if not _shell(m) and _unit(m, SPU_RANK if _in_spu(m) else TOP_RANK) is None
    ] == []


def test_no_import_breaks_the_layers() -> None:
    broken = [
        f"{imp}: {why}"
        for imp in all_imports()
        if (why := violation(imp)) is not None and (imp.importer, imp.imported) not in EXCEPTIONS
    ]
    assert not broken, "imports that break the layer order:\n" + "\n".join(broken)


def test_every_exception_is_still_needed() -> None:
    """A fixed exception leaves the list, so the list never outlives the code it excuses."""
    present = {(imp.importer, imp.imported) for imp in all_imports() if violation(imp) is not None}
    gone = [pair for pair in EXCEPTIONS if pair not in present]
    assert not gone, f"fixed: take these out of EXCEPTIONS: {gone}"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for succ in sorted(edges.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def test_no_import_cycle_among_spu_packages() -> None:
    """Between SPU packages; an excepted import is left out, as it is of the layer check."""
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in all_imports():
        if _in_spu(imp.importer) and _in_spu(imp.imported) and not _shell(imp.importer):
            here, there = _unit(imp.importer, SPU_RANK), _unit(imp.imported, SPU_RANK)
            if here and there and here != there and (imp.importer, imp.imported) not in EXCEPTIONS:
                edges[here].add(there)
    cycles = _cycles(edges)
    assert not cycles, f"SPU packages importing each other in a circle: {cycles}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from contraflow.runtime.flow import Flow\n", ["contraflow.runtime.flow"]),
        ("def f():\n    from contraflow.spu.storage import store\n", ["contraflow.spu.storage.store"]),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import contraflow.api\n",
            ["contraflow.api"],
        ),
        ("from .errors import UserError\n", ["contraflow.errors"]),
        ("import importlib\nimportlib.import_module('contraflow.spu.cluster')\n", ["contraflow.spu.cluster"]),
        ("COMMANDS = {'run': 'contraflow.run_command:run'}\n", ["contraflow.run_command"]),
    ],
)
def test_every_kind_of_import_is_seen(source: str, expected: list[str]) -> None:
    """Function-level, type-only, relative and by-name imports all count."""
    assert [imp.imported for imp in imports_in(source, "contraflow.probe")] == expected


def _positions(text: str, units: list[list[str]]) -> list[list[int]]:
    """Where each unit is first named in `text`, in full or by its last name, per layer (-1: not named)."""

    def where(unit: str) -> int:
        found = [text.find(f"`{name}`") for name in (unit, unit.rpartition(".")[2])]
        return min((p for p in found if p >= 0), default=-1)

    return [[where(unit) for unit in layer if _is_module(unit)] for layer in units]


def _in_order(positions: list[list[int]]) -> bool:
    named = [layer for layer in positions if layer]  # a layer whose units have no module yet is left out
    return all(max(lower) < min(upper) for lower, upper in zip(named, named[1:], strict=False))


def test_architecture_page_states_this_order() -> None:
    """docs/architecture.md names every layer's units, lower layers first, as this test states them."""
    page = (SRC.parent / "docs" / "architecture.md").read_text()
    section = page.split("Dependencies point down", 1)[1].split("\n## ", 1)[0]
    top, spu = section.split("Inside `contraflow.spu`:", 1)
    top_positions = _positions(top, LAYERS)
    spu_positions = _positions(spu.split(". ", 1)[0], SPU_LAYERS[1:])  # the package itself is not named
    assert -1 not in sum(top_positions + spu_positions, [])
    assert _in_order(top_positions) and _in_order(spu_positions)
