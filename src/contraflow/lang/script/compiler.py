"""Compiling tremor-script to Python, once per script: the public entry points.

`codegen` translates the syntax tree into the text of one Python function
(plus one per `fn`); this module executes that text once with `exec` and wraps
the function, which is then called per event: no tree walk per event. Runtime
errors cost nothing until they happen (`locate` maps them back to the source).
Constants are computed here, at compile time.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from contraflow.lang.errors import LangError, ScriptRuntimeError, SourceText
from contraflow.lang.script import ast
from contraflow.lang.script.aggr import Aggregate
from contraflow.lang.script.codegen import Codegen, FnCodegen, Scope, pyname, uses_nested_assignment, walk
from contraflow.lang.script.locate import Locator
from contraflow.lang.script.modules import ModuleResolver, ScriptModule, bind_uses
from contraflow.lang.script.results import AggregateCall, Env, ScriptResult

__all__ = [
    "AggregateCall",
    "CompiledExpr",
    "CompiledScript",
    "CompiledSelect",
    "Env",
    "ScriptResult",
    "compile_expr",
    "compile_script",
    "compile_select",
    "compile_text",
    "walk",
]


@dataclass
class CompiledScript:
    """A script compiled to a Python function; `run` executes it for one event.

    `fn(event, meta, state, args, group, window)` is the generated function itself: the same
    result without the error translation (for executors that handle raw exceptions).
    """

    name: str
    python_source: str
    fn: Callable[..., ScriptResult]
    locator: Locator

    def run(self, *slots: Any, **named: Any) -> ScriptResult:
        """Run the script on one event (`Env`'s arguments). `event` and `meta` may be mutated in place."""
        try:
            return self.fn(*Env(*slots, **named).slots())
        except Exception as exc:  # noqa: BLE001 - every failure becomes a located runtime error
            raise self.locator.error(exc) from exc


@dataclass
class CompiledExpr:
    """An expression compiled to a Python function (Trickle select/where/having/group by)."""

    python_source: str
    fn: Callable[..., Any]
    locator: Locator

    def __call__(self, env: Env) -> Any:
        try:
            return self.fn(*env.slots())
        except Exception as exc:  # noqa: BLE001
            raise self.locator.error(exc) from exc

    def call(self, *slots: Any, **named: Any) -> Any:
        """The expression's value for `Env`'s arguments."""
        return self(Env(*slots, **named))


@dataclass
class CompiledSelect:
    """A windowed select target: aggregates fed per event, the target computed when the window emits.

    Keep one `new_aggregates()` list per group and window; `accumulate` it with
    every event of the group, `emit` computes the target (aggregate calls read
    their window's value; `event` is whatever the caller passes, usually the
    last event of the group), and `Aggregate.merge` folds a finished window into
    the next tilt frame.
    """

    python_source: str
    fn: Callable[..., Any]
    locator: Locator
    aggregates: list[AggregateCall]

    def new_aggregates(self) -> list[Aggregate]:
        return [call.cls() for call in self.aggregates]

    def accumulate(self, aggregates: list[Aggregate], *slots: Any, **named: Any) -> None:
        """Feed one event (`Env`'s arguments) to every aggregate."""
        env = Env(*slots, **named)
        for call, agg in zip(self.aggregates, aggregates, strict=True):
            values_ = [arg(env) for arg in call.args]
            try:
                agg.accumulate(*values_)
            except ScriptRuntimeError as err:
                raise ScriptRuntimeError(err.message, call.position, self.locator.node) from err

    def emit(self, aggregates: list[Aggregate], *slots: Any, **named: Any) -> Any:
        """The target, for `Env`'s arguments (all optional), with the aggregates' values."""
        values_ = [agg.emit() for agg in aggregates]
        try:
            return self.fn(*Env(*slots, **named).slots(), values_)
        except Exception as exc:  # noqa: BLE001
            raise self.locator.error(exc) from exc


P = ParamSpec("P")
R = TypeVar("R")


def _not_too_deep(compile_fn: Callable[P, R]) -> Callable[P, R]:
    """Turn Python's RecursionError on very deeply nested code into a language error at its start."""

    @functools.wraps(compile_fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return compile_fn(*args, **kwargs)
        except RecursionError:
            node: Any = args[0] if args else None
            source = kwargs.get("source") or getattr(node, "source", None)
            raise LangError(
                "the input is nested too deeply to compile",
                node.pos,
                source if isinstance(source, SourceText) else None,
                hint="split deeply nested expressions with `let` or `fn`",
            ) from None

    return run


def _counter_filename(name: str) -> str:
    return f"<tremor:{name}:{next(_FILE_IDS)}>"


_FILE_IDS = itertools.count()


def _prepare(
    source: SourceText | None,
    name: str,
    consts: Mapping[str, Any] | None,
    fns: Mapping[str, ast.FnDefn] | None,
    script: ast.Script | None,
    modules: ModuleResolver | None = None,
) -> Codegen:
    """A code generator holding the functions and constants the script can use.

    Constant names are known before functions are generated (a function may
    read a constant); constant values are computed afterwards, in order, so a
    constant may call a function.
    """
    gen = Codegen(source, _counter_filename(name), consts or {}, fns or {})
    used_fns = _apply_uses(gen, script.uses if script else (), modules)
    all_fns = (
        list((fns or {}).items())
        + list(used_fns.items())
        + [(f.name, f) for f in (script.fns if script else ())]
    )
    for fn_name, defn in all_fns:
        gen.fns[fn_name] = defn
        gen.fn_names[fn_name] = pyname("_u_", fn_name.replace("::", "__"))
    script_consts = script.consts if script else ()
    for const in script_consts:
        gen.consts[const.name] = pyname("_c_", const.name)
    for fn_name, defn in all_fns:
        FnCodegen(gen).define(fn_name, defn)
    for const in script_consts:
        gen.globals[gen.consts[const.name]] = _const_value(gen, const)
    return gen


def _apply_uses(
    gen: Codegen, uses: tuple[ast.Use, ...], modules: ModuleResolver | None
) -> dict[str, ast.FnDefn]:
    """Bind the script's `use`s into `gen`; returns the functions they bring in."""
    try:
        bound = bind_uses(uses, modules)
    except LangError as err:
        raise gen.error(err.message, err.position, err.hint) from None
    gen.aliases.update(bound.aliases)
    for key, value in bound.consts.items():
        gen.add_const(key, value)
    return bound.fns


def module_exports(script: ast.Script, modules: ModuleResolver | None = None) -> ScriptModule:
    """The constants (evaluated) and functions a module script defines, for `use`."""
    gen = _prepare(script.source, "<module>", None, None, script, modules)
    consts = {const.name: gen.globals[gen.consts[const.name]] for const in script.consts}
    return ScriptModule(consts, {f.name: f for f in script.fns})


def _const_value(gen: Codegen, const: ast.ConstDefn) -> Any:
    for node in walk(const.value):
        if isinstance(node, ast.Path) and node.root != "local":
            raise gen.error(
                f"constant `{const.name}` cannot depend on `{node.text()}`",
                node.pos,
                "a constant is computed once, before any event",
            )
    sub = Codegen(gen.source, _counter_filename(const.name), {}, {})
    sub.counter = gen.counter
    sub.globals = dict(gen.globals)
    sub.consts, sub.fns, sub.fn_names = dict(gen.consts), gen.fns, gen.fn_names
    sub.aliases = gen.aliases
    sub.lines, sub.linemap = list(gen.lines), dict(gen.linemap)
    fn = _function(sub, "_const", list(Env.__slots__), (const.value,), Scope(allow_emit=False), const, "expr")
    try:
        return fn(*Env().slots())
    except Exception as exc:  # noqa: BLE001
        err = Locator(sub.filename, sub.linemap, const.name).error(exc)
        raise gen.error(f"cannot compute constant `{const.name}`: {err.message}", const.pos) from None


def _function(
    gen: Codegen,
    entry: str,
    params: list[str],
    body: tuple[ast.Expr, ...],
    scope: Scope,
    node: ast.Node,
    kind: str,
) -> Callable[..., Any]:
    """Emit `entry` (`Codegen.function`), run the generated module once and return the function."""
    gen.function(entry, params, body, scope, node, kind)
    code = compile("\n".join(gen.lines) + "\n", gen.filename, "exec")
    exec(code, gen.globals)  # noqa: S102 - this is the compiler's output, run once
    fn: Callable[..., Any] = gen.globals[entry]
    return fn


def _locator(gen: Codegen, name: str) -> Locator:
    return Locator(gen.filename, gen.linemap, name, gen.source)


@_not_too_deep
def compile_script(
    script_ast: ast.Script,
    *,
    name: str,
    consts: Mapping[str, Any] | None = None,
    fns: Mapping[str, ast.FnDefn] | None = None,
    source: SourceText | None = None,
    modules: ModuleResolver | None = None,
) -> CompiledScript:
    """Compile a parsed script; `consts`/`fns` come from enclosing definitions (Trickle/Troy modules).

    `modules` resolves the script's own `use` of script modules (library modules need
    nothing). Raises LangError for unknown names, unknown functions, wrong arity and
    misplaced statements.
    """
    gen = _prepare(source or script_ast.source, name, consts, fns, script_ast, modules)
    gen.copy_on_let = uses_nested_assignment(script_ast)
    body = script_ast.exprs
    if script_ast.result_const is not None:  # a script ending in `const X = ...` yields X
        body = (*body, ast.Path(script_ast.pos, "local", script_ast.result_const, ()))
    fn = _function(gen, "_script", list(Env.__slots__), body, Scope(), script_ast, "script")
    return CompiledScript(name, "\n".join(gen.lines), fn, _locator(gen, name))


@_not_too_deep
def compile_expr(
    expr_ast: ast.Expr,
    *,
    name: str = "<expr>",
    consts: Mapping[str, Any] | None = None,
    fns: Mapping[str, ast.FnDefn] | None = None,
    source: SourceText | None = None,
) -> CompiledExpr:
    """Compile one expression to `CompiledExpr` (call it with an `Env`, or `.call(event, meta, ...)`)."""
    gen = _prepare(source, name, consts, fns, None)
    fn = _function(gen, "_expr", list(Env.__slots__), (expr_ast,), Scope(allow_emit=False), expr_ast, "expr")
    return CompiledExpr("\n".join(gen.lines), fn, _locator(gen, name))


@_not_too_deep
def compile_select(
    expr_ast: ast.Expr,
    *,
    name: str = "<select>",
    consts: Mapping[str, Any] | None = None,
    fns: Mapping[str, ast.FnDefn] | None = None,
    source: SourceText | None = None,
) -> CompiledSelect:
    """Compile the target of a windowed select, where `aggr::` calls are allowed (see `CompiledSelect`)."""
    gen = _prepare(source, name, consts, fns, None)
    gen.aggregates = []
    visible = {const: gen.globals[py] for const, py in gen.consts.items() if py in gen.globals}

    def compile_arg(arg: ast.Expr, call_name: str) -> CompiledExpr:
        return compile_expr(arg, name=call_name, consts=visible, fns=gen.fns, source=gen.source)

    gen.compile_arg = compile_arg
    params = [*Env.__slots__, "_aggr"]
    fn = _function(gen, "_select", params, (expr_ast,), Scope(allow_emit=False), expr_ast, "expr")
    return CompiledSelect("\n".join(gen.lines), fn, _locator(gen, name), gen.aggregates)


def compile_text(text: str, *, name: str, file: str = "<script>") -> CompiledScript:
    """Parse and compile script source in one step."""
    from contraflow.lang.script.parser import parse_script

    return compile_script(parse_script(text, file), name=name)
