"""Finding a Python operator's function: next to the flow file, on $CONTRAFLOW_PATH, then `sys.path`.

The compiler only records the directories (`OperatorSpec.search_path`; `contraflow check` imports
nothing); the lookup itself is `contraflow.user_modules`, the one Python connectors use too. A deploy imports every operator's module in the runtime process (`check_operators`), so
a missing module or function is a language error at the line and column of `module = ...` or
`function = ...` before any query starts. Spark's Python workers import the same way
(`load_function`); on a cluster the modules are shipped in a zip (`module_zip`), as contraflow's
own package is.
"""

from __future__ import annotations

import hashlib
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from contraflow.lang.errors import LangError, LangErrors, Position, SourceText
from contraflow.lang.graph import OperatorSpec, PipelineGraph
from contraflow.lang.trickle.kinds import PYTHON_KINDS
from contraflow.user_modules import UserModuleNotFound, find_user_module, import_user_module

UserFunction = Callable[[Any, Any], Any]

_functions: dict[tuple[str, str, tuple[str, ...]], UserFunction] = {}


def load_function(spec: OperatorSpec) -> UserFunction:
    """The operator's function, imported once per process (raises ImportError/AttributeError)."""
    module_name, function_name = spec.config["module"], spec.config["function"]
    key = (module_name, function_name, tuple(spec.search_path))
    found = _functions.get(key)
    if found is None:
        module = import_user_module(module_name, [Path(d) for d in spec.search_path])
        found = getattr(module, function_name, None)
        if not callable(found):
            raise AttributeError(f"module '{module_name}' has no function '{function_name}'")
        _functions[key] = found
    return found


def python_operators(graph: PipelineGraph) -> Iterator[OperatorSpec]:
    """Every Python operator of `graph`, nested pipelines included."""
    for node in graph.nodes.values():
        if isinstance(node.spec, PipelineGraph):
            yield from python_operators(node.spec)
        elif isinstance(node.spec, OperatorSpec) and node.spec.kind in PYTHON_KINDS:
            yield node.spec


def check_operators(graph: PipelineGraph) -> None:
    """Import every Python operator's function now: a missing one is a LangError at its position."""
    errors = []
    for spec in python_operators(graph):
        try:
            load_function(spec)
        except UserModuleNotFound as exc:
            hint = "looked next to the flow file, on CONTRAFLOW_PATH, then on sys.path: " + ", ".join(
                spec.search_path
            )
            errors.append(_error(spec, "module", f"cannot import Python module: {exc}", hint))
        except AttributeError as exc:
            errors.append(_error(spec, "function", str(exc), "define it at the module's top level"))
        except Exception as exc:  # the module itself failed while importing
            message = f"importing module '{spec.config['module']}' failed: {type(exc).__name__}: {exc}"
            errors.append(_error(spec, "module", message, ""))
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise LangErrors(errors)


def _error(spec: OperatorSpec, key: str, message: str, hint: str) -> LangError:
    position = spec.positions.get(key) or Position(f"<operator {spec.definition}>", 1, 1)
    return LangError(
        f"operator {spec.definition} ({spec.kind}): {message}", position, _source(position), hint
    )


def _source(position: Position) -> SourceText | None:
    path = Path(position.file)
    if not path.is_file():
        return None
    return SourceText(position.file, path.read_text(encoding="utf-8", errors="replace"))


def module_files(graph: PipelineGraph) -> list[tuple[Path, str]]:
    """The files of every Python operator's top-level module or package found next to the flow or on
    $CONTRAFLOW_PATH, with their names in a zip (what an executor needs on its path to import
    them). Modules from `sys.path` are installed, like contraflow's other dependencies."""
    found: dict[str, tuple[Path, str]] = {}
    for spec in python_operators(graph):
        top = spec.config["module"].split(".")[0]
        module_spec = find_user_module(top, [Path(d) for d in spec.search_path])
        if module_spec is None or module_spec.origin is None or not Path(module_spec.origin).is_file():
            continue  # from sys.path: installed where contraflow is, as any dependency is
        origin = Path(module_spec.origin).resolve()
        if module_spec.submodule_search_locations:  # a package: the whole directory
            root = origin.parent
            for path in sorted(root.rglob("*.py")):
                found[str(path)] = (path, str(Path(top) / path.relative_to(root)))
        else:
            found[str(origin)] = (origin, origin.name)
    return list(found.values())


def module_zip(graph: PipelineGraph, directory: Path) -> Path | None:
    """A zip of the user's modules in `directory` for `SparkContext.addPyFile`, or None when there
    are none. Named by its content: Spark refuses a second file of one name, and a module changed
    between two deploys must reach the executors as a new file."""
    files = module_files(graph)
    if not files:
        return None
    digest = hashlib.sha256()
    for path, name in files:
        digest.update(name.encode() + b"\0" + path.read_bytes())
    target = directory / f"contraflow-user-modules-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
            for path, name in files:
                archive.write(path, name)
    return target


def ship_modules(spark: Any, graph: PipelineGraph) -> PipelineGraph:
    """`graph` as the executors run it. On a cluster the user's modules of `graph` are sent to the
    executors in a zip, and the graph returned looks nowhere else (its operators' search paths
    emptied): the executors run the modules as they were at the deploy, whatever the directories
    hold later or on their machines. Local workers import the modules from where they are."""
    from contraflow.spark.session import is_local_master, register

    context = spark.sparkContext
    if is_local_master(context.master):
        return graph
    target = module_zip(graph, Path(tempfile.gettempdir()))
    if target is None:
        return graph
    context.addPyFile(str(target))
    # A Python function's task takes the files added before the function was made: the
    # `contraflow` source (whose read tasks run stateless pipelines) is registered again with them.
    register(spark)
    return _without_search_path(graph)


def _without_search_path(graph: PipelineGraph) -> PipelineGraph:
    nodes = {}
    for name, node in graph.nodes.items():
        spec = node.spec
        if isinstance(spec, PipelineGraph):
            spec = _without_search_path(spec)
        elif isinstance(spec, OperatorSpec) and spec.kind in PYTHON_KINDS:
            spec = replace(spec, search_path=[])
        nodes[name] = node if spec is node.spec else replace(node, spec=spec)
    return replace(graph, nodes=nodes)
