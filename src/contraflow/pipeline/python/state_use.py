"""Which `python::batch` functions keep state, decided from their code when a pipeline starts.

A `python::batch` has `ctx.state` as a `python::map` has: per key of the pipeline, in Spark's
checkpoint. A stateful node runs in the pipeline's ordered stream after the shuffle
(`transformWithState`). Most batch functions (a lookup, a model's scoring) never touch state, and
those are worth running in the read tasks instead: in parallel over the input partitions, between
columnar plans, before a windowed select's partial aggregation (`contraflow.pipeline.python.staged`).

So the compiler marks every `python::batch` stateful (it imports nothing), and `settle_batch_state`
imports each function when its pipeline starts and marks it stateless only when its code cannot
reach `ctx.state`: the context parameter is only ever read as `ctx.args` or `ctx.meta`. Anything
else (the context handed to another function, captured by a closure, rebound, a call of `locals`,
`vars`, `eval`, `exec` or a frame accessor, a function that is not plain Python code) keeps it
stateful. The check errs one way only: a stateless function may run as a stateful one, never the
reverse.
"""

from __future__ import annotations

import dis
import inspect
from dataclasses import replace
from typing import Any

from contraflow.lang.graph import Node, OperatorSpec, PipelineGraph
from contraflow.pipeline.python.modules import load_function

# Reading these never reaches the state.
_READABLE = frozenset({"args", "meta"})
# Names through which code can reach a local variable without naming it.
_FRAME_ACCESS = frozenset({"locals", "vars", "eval", "exec", "_getframe", "currentframe", "stack", "trace"})
_ATTRIBUTE_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})


def reaches_state(function: Any) -> bool:
    """Whether `function(table, ctx)` may read or assign `ctx.state` (True when it cannot tell)."""
    if not inspect.isfunction(function):
        return True  # a callable object, a builtin, a bound method: no code to read
    code = function.__code__
    if code.co_argcount < 2:
        return bool(code.co_flags & inspect.CO_VARARGS)  # ctx inside *args, or no ctx at all
    name = code.co_varnames[1]
    if name in code.co_cellvars or _FRAME_ACCESS & set(code.co_names):
        return True
    instructions = list(dis.get_instructions(code))
    for index, instruction in enumerate(instructions):
        names = instruction.argval if isinstance(instruction.argval, tuple) else (instruction.argval,)
        if instruction.opcode not in dis.haslocal or name not in names:
            continue
        if instruction.opname not in ("LOAD_FAST", "LOAD_FAST_CHECK") or index + 1 == len(instructions):
            return True  # rebound, deleted, or loaded together with another local
        following = instructions[index + 1]
        if following.opname not in _ATTRIBUTE_LOADS or following.argval not in _READABLE:
            return True
    return False


def settle_batch_state(graph: PipelineGraph) -> PipelineGraph:
    """`graph` with each `python::batch` stateful only when its function may reach `ctx.state`
    (imports the functions; nested pipelines included). The same graph when nothing changes."""
    nodes: dict[str, Node] = {}
    for name, node in graph.nodes.items():
        spec = node.spec
        if isinstance(spec, PipelineGraph):
            inner = settle_batch_state(spec)
            if inner is not spec:
                node = replace(node, spec=inner, stateful=inner.stateful)
        elif isinstance(spec, OperatorSpec) and spec.kind == "python::batch":
            stateful = reaches_state(load_function(spec))
            if stateful != node.stateful:
                node = replace(node, stateful=stateful)
        nodes[name] = node
    if all(nodes[name] is graph.nodes[name] for name in nodes):
        return graph
    return replace(graph, nodes=nodes)
