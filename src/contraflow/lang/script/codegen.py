"""Code generation: a tremor-script syntax tree becomes the text of Python functions.

Each tremor expression becomes a Python expression where it can (inlined dict
lookups, comparisons with literals) and statements where it must (`match`,
`for`, `patch`, `let`, `emit`, `drop`). Operations whose Python meaning differs
from Tremor's call the helpers of `values`. `compiler` runs the generated text.
"""

from __future__ import annotations

import ast as pyast
import difflib
import itertools
import keyword
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from contraflow.lang.errors import LangError, Position, ScriptRuntimeError, SourceText
from contraflow.lang.script import ast, stdlib, values
from contraflow.lang.script.aggr import AGGREGATES, lookup_aggregate
from contraflow.lang.script.extractors import EXTRACTORS, build_extractor
from contraflow.lang.script.locate import LineInfo
from contraflow.lang.script.modules import qualify
from contraflow.lang.script.results import AggregateCall, ScriptResult

# A case's condition and the locals it binds (name, code), from the case.
CaseTest = Callable[[ast.Case], tuple[str, list[tuple[str, str]]]]

_RO_ROOTS = ("args", "group", "window")
_STMT_NODES = (ast.Match, ast.For, ast.Patch, ast.Let, ast.Emit, ast.Drop)
_PY_LITERAL_TYPES = (str, int, float, bool, type(None))

_HELPERS: dict[str, Any] = {
    "_M": values.MISSING,
    "_eq": values.eq,
    "_ne": values.ne,
    "_bool": values.bool_operand,
    "_xor": values.xor,
    "_get_index": values.get_index,
    "_get_range": values.get_range,
    "_lookup": values.lookup,
    "_interp": values.interpolate,
    "_set_path": values.set_path,
    "_own": values.copy_value,
    "_merge": values.merge_expr,
    "_patch_start": values.patch_start,
    "_patch_apply": values.patch_apply,
    "_items": values.items_of,
    "_fail": values.fail,
    "_fold": values.fold_step,
    "_pairs": values.array_pairs,
    "_range_ok": values.range_present,
    "_unknown": values.unknown_name,
    "_bin": values.build_binary,
    "_binmatch": values.match_binary,
}
_BINARY_HELPERS = {
    "+": "_add",
    "-": "_sub",
    "*": "_mul",
    "/": "_div",
    "%": "_mod",
    "&": "_band",
    "|": "_bor",
    "^": "_bxor",
    "<<": "_shl",
    ">>": "_shr",
    ">>>": "_ushr",
    "==": "_eq",
    "!=": "_ne",
    "<": "_lt",
    "<=": "_le",
    ">": "_gt",
    ">=": "_ge",
    "xor": "_xor",
}
_UNARY_HELPERS = {"-": "_neg", "+": "_pos", "not": "_not", "!": "_bnot"}
for _op, _name in _BINARY_HELPERS.items():
    _HELPERS[_name] = values.BINARY[_op]
for _op, _name in _UNARY_HELPERS.items():
    _HELPERS[_name] = values.UNARY[_op]


def _pattern_cmp(op: str) -> Callable[[Any, Any], bool]:
    """Comparison inside a record pattern: an absent field does not match; values that cannot
    be compared are a runtime error, as in Tremor."""
    fn = values.BINARY[op]

    def cmp(a: Any, b: Any) -> bool:
        if a is values.MISSING:
            return False
        return bool(fn(a, b))

    return cmp


def _array_match(arr: list[Any], preds: tuple[Callable[[Any], bool], ...]) -> bool:
    """`%[p1, p2]`: every element pattern matches at least one element."""
    return all(any(p(e) for e in arr) for p in preds)


_HELPERS["_arr"] = _array_match
_HELPERS["_R"] = ScriptResult
for _op in ("<", "<=", ">", ">=", "!="):
    _HELPERS[f"_p{_BINARY_HELPERS[_op]}"] = _pattern_cmp(_op)


# ---------------------------------------------------------------- tree helpers


def children(node: Any) -> Iterator[Any]:
    """Direct sub-nodes of an AST node (through tuples and pairs)."""
    if not is_dataclass(node):
        return
    for f in fields(node):
        yield from _flatten(getattr(node, f.name))


def _flatten(value: Any) -> Iterator[Any]:
    if isinstance(value, ast.Node):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _flatten(item)


def walk(node: Any) -> Iterator[Any]:
    yield node
    for child in children(node):
        yield from walk(child)


def _needs_statements(node: Any) -> bool:
    return any(isinstance(n, _STMT_NODES) for n in walk(node))


def pyname(prefix: str, name: str) -> str:
    clean = name if name.isidentifier() and not keyword.iskeyword(name) else name.encode().hex()
    return f"{prefix}{clean}"


def _did_you_mean(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1)
    return f"did you mean `{close[0]}`?" if close else ""


# ---------------------------------------------------------------- code generation


@dataclass
class _FieldCache:
    """Variables holding a match subject's dict-ness and its prefetched fields (MISSING if absent)."""

    is_dict: str
    fields: dict[str, str]


@dataclass
class Scope:
    """Names visible in the function being generated."""

    locals: set[str] = field(default_factory=set)
    in_fn: str | None = None  # python name of the user function being compiled
    fn_params: tuple[str, ...] = ()
    allow_emit: bool = True
    varargs: bool = False  # inside `fn f(a, ...)`: `args` is the array of extra arguments


class Codegen:
    def __init__(
        self,
        source: SourceText | None,
        filename: str,
        consts: Mapping[str, Any],
        fns: Mapping[str, ast.FnDefn],
    ) -> None:
        self.source = source
        self.filename = filename
        self.lines: list[str] = []
        self.linemap: dict[int, LineInfo] = {}
        self.indent = 0
        self.globals: dict[str, Any] = dict(_HELPERS)
        self.counter = itertools.count()
        self.consts: dict[str, str] = {}
        self.fns: dict[str, ast.FnDefn] = dict(fns)
        self.fn_names: dict[str, str] = {}
        self.scope = Scope()
        self.copy_on_let = False
        self.field_cache: dict[str, _FieldCache] = {}
        self.node_vars: dict[int, str] = {}
        self.aggregates: list[AggregateCall] | None = None
        self.compile_arg: Callable[[ast.Expr, str], Any] | None = None
        # `use std::string as s;`: alias -> module path, for calls like `s::len(x)`.
        self.aliases: dict[str, str] = {}
        # > 0 while compiling code that may never run (a case body, a loop body):
        # an unknown name there is an error only if it is reached, as in Tremor.
        self.branch_depth = 0
        for name, value in consts.items():
            self.add_const(name, value)

    # ------------------------------------------------------------ plumbing
    def error(self, message: str, pos: Position, hint: str = "") -> LangError:
        return LangError(message, pos, _source_of(pos, self.source), hint=hint)

    def tmp(self) -> str:
        return f"_t{next(self.counter)}"

    def line(self, code: str, node: ast.Node | None = None, what: str = "") -> None:
        self.lines.append("    " * self.indent + code)
        if node is not None:
            self.linemap[len(self.lines)] = LineInfo(node.pos, what)

    def add_global(self, prefix: str, value: Any) -> str:
        name = f"{prefix}{next(self.counter)}"
        self.globals[name] = value
        return name

    def add_const(self, name: str, value: Any) -> None:
        py = pyname("_c_", name)
        self.globals[py] = value
        self.consts[name] = py

    def literal(self, value: Any) -> str:
        if type(value) in _PY_LITERAL_TYPES and not (type(value) is float and not math.isfinite(value)):
            return repr(value)
        return self.add_global("_k", value)

    # ------------------------------------------------------------ functions
    def function(
        self,
        pyname: str,
        params: list[str],
        body: tuple[ast.Expr, ...],
        scope: Scope,
        node: ast.Node,
        kind: str,
    ) -> None:
        """Emit `def pyname(params): body` returning per `kind` ('script', 'expr', 'fn')."""
        saved, self.scope = self.scope, scope
        self.line(f"def {pyname}({', '.join(params)}):", node)
        self.indent += 1
        if "*_va" in params:
            self.line("_va = list(_va)")
        if kind == "fn" and self.copy_on_let:
            for param in params:
                if not param.startswith("*"):
                    self.line(f"{param} = _own({param})")
        result = self.block(body)
        ends_with_exit = bool(body) and isinstance(body[-1], (ast.Emit, ast.Drop))
        if kind == "script" and not ends_with_exit:
            self.line(f"return _R(None, {result}, False, state, meta)", body[-1] if body else node)
        elif kind != "script":
            self.line(f"return {result}", node)
        self.indent -= 1
        self.scope = saved

    def block(self, body: tuple[ast.Expr, ...]) -> str:
        """Compile expressions in order; the Python expression of the last one's value."""
        result = "None"
        for i, expr in enumerate(body):
            value = self.expr(expr)
            if i == len(body) - 1:
                result = value
            elif not (_is_trivial(value) or _is_literal_code(value)):
                self.line(f"_ = {value}", expr, "")
        return result

    def owned(self, code: str) -> str:
        """`code`, copied if the script may later modify the bound value in place (value semantics)."""
        return f"_own({code})" if self.copy_on_let else code

    def hoist(self, code: str, node: ast.Node, what: str = "") -> str:
        """Evaluate `code` into a fresh temporary on its own line (for precise error positions)."""
        name = self.tmp()
        self.line(f"{name} = {code}", node, what)
        return name

    # ------------------------------------------------------------ expressions
    def expr(self, node: ast.Expr, inline: bool = False) -> str:
        """Python code for `node`'s value; may emit statements unless `inline` (then it must not)."""
        method = getattr(self, f"_x_{type(node).__name__}")
        result: str = method(node, inline)
        return result

    def _x_Literal(self, node: ast.Literal, inline: bool) -> str:
        return self.literal(node.value)

    def _x_Interpolated(self, node: ast.Interpolated, inline: bool) -> str:
        parts = [repr(p) if isinstance(p, str) else self.expr(p, inline) for p in node.parts]
        return f"_interp({', '.join(parts)})"

    def _x_RecordLit(self, node: ast.RecordLit, inline: bool) -> str:
        items = []
        for key, value in node.fields:
            k = self.expr(key, inline)
            if not (isinstance(key, ast.Literal) and isinstance(key.value, str)):
                k = f"_interp({k})"
            items.append(f"{k}: {self.expr(value, inline)}")
        return "{" + ", ".join(items) + "}"

    def _x_ArrayLit(self, node: ast.ArrayLit, inline: bool) -> str:
        return "[" + ", ".join(self.expr(i, inline) for i in node.items) + "]"

    def _x_Unary(self, node: ast.Unary, inline: bool) -> str:
        if isinstance(node.operand, ast.Literal):
            return self.folded(values.UNARY[node.op], (node.operand.value,), node)
        code = f"{_UNARY_HELPERS[node.op]}({self.expr(node.operand, inline)})"
        return code if inline else self.hoist(code, node, node.op)

    def _x_Binary(self, node: ast.Binary, inline: bool) -> str:
        if node.op in ("and", "or"):
            return self._logic(node, inline)
        if isinstance(node.left, ast.Literal) and isinstance(node.right, ast.Literal):
            return self.folded(values.BINARY[node.op], (node.left.value, node.right.value), node)
        left = self.expr(node.left, inline)
        right = self.expr(node.right, inline)
        if node.op in ("==", "!=") and (_is_plain_str(node.right) or _is_plain_str(node.left)):
            value, text = (left, node.right) if _is_plain_str(node.right) else (right, node.left)
            assert isinstance(text, ast.Literal)
            # a binary of the same bytes is equal too (Tremor's binary/string `==`)
            alike = (text.value, text.value.encode())
            code = f"({value} {'in' if node.op == '==' else 'not in'} {alike!r})"
        else:
            code = f"{_BINARY_HELPERS[node.op]}({left}, {right})"
        return code if inline else self.hoist(code, node, node.op)

    def folded(self, op: Callable[..., Any], operands: tuple[Any, ...], node: ast.Node) -> str:
        """An operator on literals, computed once here: operands it is not defined for are a
        compile error, as Tremor reports them (`1 + "a"` fails at `contraflow check`)."""
        try:
            return self.literal(op(*operands))
        except ScriptRuntimeError as err:
            raise self.error(err.message, node.pos) from None

    def _logic(self, node: ast.Binary, inline: bool) -> str:
        left = self.expr(node.left, inline)
        if not _needs_statements(node.right):
            right = self.expr(node.right, inline=True)
            code = f"(_bool({left}) {node.op} _bool({right}))"
            return code if inline else self.hoist(code, node, node.op)
        if inline:
            raise self.error("this expression cannot appear here", node.pos)
        result = self.hoist(f"_bool({left})", node, node.op)
        test = result if node.op == "and" else f"not {result}"
        self.line(f"if {test}:", node)
        self.indent += 1
        right = self.expr(node.right)
        self.line(f"{result} = _bool({right})", node.right, node.op)
        self.indent -= 1
        return result

    def _x_Present(self, node: ast.Present, inline: bool) -> str:
        path = node.path
        root = self.path_root(path)
        if root is None:
            code = "False"
        else:
            code = root
            for seg in path.segments:
                if isinstance(seg, ast.RangeSeg):
                    start, end = self.expr(seg.start, inline), self.expr(seg.end, inline)
                    code = f"_range_ok({code}, {start}, {end})"
                else:
                    code = f"_lookup({code}, {self.segment_key(seg, inline)})"
            code = f"({code} is not _M)" if path.segments else "True"
        if node.absent:
            code = f"(not {code})"
        return code

    def _x_Path(self, node: ast.Path, inline: bool) -> str:
        root = self.path_root(node)
        if root is None:
            if self.branch_depth == 0 or node.name is None or "::" in node.name:
                raise self.unknown_name(node)
            return self.hoist(f"_unknown({node.name!r})", node, node.name)
        code = root
        for seg in node.segments:
            if isinstance(seg, ast.KeySeg):
                code = f"{code}[{seg.key!r}]"
            elif isinstance(seg, ast.IndexSeg) and _is_plain_str(seg.index):
                code = f"{code}[{self.expr(seg.index, True)}]"
            elif isinstance(seg, ast.IndexSeg):
                code = f"_get_index({code}, {self.expr(seg.index, inline)})"
            else:
                code = f"_get_range({code}, {self.expr(seg.start, inline)}, {self.expr(seg.end, inline)})"
        if inline or not node.segments:
            return code
        name = self.tmp()
        self.lines.append("    " * self.indent + f"{name} = {code}")
        self.linemap[len(self.lines)] = LineInfo(node.pos, node.text(), node)
        return name

    def _x_BinaryLit(self, node: ast.BinaryLit, inline: bool) -> str:
        parts = [f"({self.expr(s.value, inline)}, {s.size!r}, {s.types!r})" for s in node.segments]
        code = f"_bin({', '.join(parts)})"
        return code if inline else self.hoist(code, node, "<<...>>")

    def _x_ExprPath(self, node: ast.ExprPath, inline: bool) -> str:
        """Segments on a computed value go through the checked accessors (they name what failed)."""
        code = self.expr(node.target, inline)
        for seg in node.segments:
            if isinstance(seg, ast.RangeSeg):
                code = f"_get_range({code}, {self.expr(seg.start, inline)}, {self.expr(seg.end, inline)})"
            else:
                code = f"_get_index({code}, {self.segment_key(seg, inline)})"
        return code if inline else self.hoist(code, node, "path")

    def segment_key(self, seg: ast.Segment, inline: bool) -> str:
        if isinstance(seg, ast.KeySeg):
            return repr(seg.key)
        if isinstance(seg, ast.IndexSeg):
            return self.expr(seg.index, inline)
        raise self.error("`present`/`absent` cannot test a range", seg.pos)

    def path_root(self, node: ast.Path) -> str | None:
        """Python code for the path's root, or None for an unknown local name."""
        if node.root != "local":
            if node.root == "args" and self.scope.varargs:
                return "_va"
            if self.scope.in_fn is not None:
                raise self.error(
                    f"functions cannot access `{node.text()}`",
                    node.pos,
                    "pass the value as an argument instead",
                )
            return node.root
        name = node.name or ""
        if name in self.scope.locals:
            return pyname("l_", name)
        if name in self.consts:
            return self.consts[name]
        return None

    def unknown_name(self, node: ast.Path) -> LangError:
        name = node.name or ""
        if "::" in name:
            module = name.rsplit("::", 1)[0]
            known = sorted(c for c in self.consts if c.startswith(f"{module}::"))
            hint = _did_you_mean(name, known) or f"bring the module in with `use ...::{module};`"
            return self.error(f"unknown constant `{name}`", node.pos, hint)
        options = sorted(self.scope.locals | set(self.consts))
        hint = (
            _did_you_mean(name, options) or f"define it first with `let {name} = ...` or `const {name} = ...`"
        )
        return self.error(f"unknown name `{name}`", node.pos, hint)

    def _x_Call(self, node: ast.Call, inline: bool) -> str:
        if node.name.startswith("aggr::"):
            return self.aggregate_call(node)
        args = [self.expr(a, inline) for a in node.args]
        target = self.call_target(node)
        code = f"{target}({', '.join(args)})"
        return code if inline else self.hoist(code, node, f"{node.name}(...)")

    def aggregate_call(self, node: ast.Call) -> str:
        """An aggregate in a windowed select: its value is the window's, passed in as `_aggr[i]`."""
        cls = lookup_aggregate(node.name)
        if cls is None:
            hint = _did_you_mean(node.name, sorted(AGGREGATES)) or "see aggr::stats::* and aggr::win::*"
            raise self.error(f"unknown aggregate function `{node.name}`", node.pos, hint)
        if self.aggregates is None:
            raise self.error(
                f"aggregate function `{node.name}` can only be used in the target of a windowed select",
                node.pos,
            )
        n = len(node.args)
        if n < cls.min_args or n > cls.max_args:
            expected = (
                str(cls.min_args) if cls.min_args == cls.max_args else f"{cls.min_args} to {cls.max_args}"
            )
            raise self.error(
                f"wrong number of arguments for `{node.name}`: got {n}, expected {expected}", node.pos
            )
        for arg in node.args:
            nested = next(
                (c for c in walk(arg) if isinstance(c, ast.Call) and c.name.startswith("aggr::")), None
            )
            if nested is not None:
                raise self.error("aggregate functions cannot be nested", nested.pos)
        assert self.compile_arg is not None, "compile_select sets compile_arg with aggregates"
        compiled_args = [self.compile_arg(arg, node.name) for arg in node.args]
        self.aggregates.append(AggregateCall(node.name, cls, compiled_args, node.pos, tuple(node.args)))
        return f"_aggr[{len(self.aggregates) - 1}]"

    def call_target(self, node: ast.Call) -> str:
        name = node.name
        if name == "recur":
            if self.scope.in_fn is None:
                raise self.error("`recur` can only be used inside a function", node.pos)
            if len(node.args) != len(self.scope.fn_params):
                raise self.arity_error(node, len(self.scope.fn_params))
            return self.scope.in_fn
        if name in self.fns:
            defn = self.fns[name]
            n = len(node.args)
            if n < len(defn.params) or (n > len(defn.params) and not defn.varargs):
                raise self.arity_error(node, len(defn.params), defn.varargs)
            return self.fn_names[name]
        name = self.qualified(name)
        fn = stdlib.lookup(name)
        if fn is None:
            options = list(self.fns) + stdlib.all_names()
            hint = _did_you_mean(name, options) or "check the module and function name"
            raise self.error(f"unknown function `{name}`", node.pos, hint)
        n = len(node.args)
        if n < fn.min_args or (fn.max_args is not None and n > fn.max_args):
            raise self.error(
                f"wrong number of arguments for `{name}`: got {n}, expected {fn.arity_text()}", node.pos
            )
        py = pyname("_f_", fn.name.replace("::", "__"))
        self.globals[py] = fn.fn
        return py

    def qualified(self, name: str) -> str:
        """`s::len` after `use std::string as s;` is `std::string::len`."""
        return qualify(name, self.aliases)

    def arity_error(self, node: ast.Call, expected: int, varargs: bool = False) -> LangError:
        want = f"at least {expected}" if varargs else str(expected)
        return self.error(
            f"wrong number of arguments for `{node.name}`: got {len(node.args)}, expected {want}",
            node.pos,
        )

    # ------------------------------------------------------------ statements
    def _statement_only(self, node: ast.Node, inline: bool) -> None:
        if inline:
            raise self.error(
                f"`{_keyword(node)}` cannot be used inside this expression",
                node.pos,
                "compute it with `let` first and use the variable here",
            )

    def _x_Let(self, node: ast.Let, inline: bool) -> str:
        self._statement_only(node, inline)
        target = node.target
        value = self.expr(node.value)
        if self.copy_on_let and not isinstance(
            node.value, (ast.Literal, ast.Interpolated, ast.Binary, ast.Unary)
        ):
            value = f"_own({value})"
        if target.root in _RO_ROOTS:
            raise self.error(f"cannot assign to `{target.root}`: it is read-only", target.pos)
        if self.scope.in_fn is not None and target.root != "local":
            raise self.error(f"functions cannot assign to `{target.text()}`", target.pos)
        if target.root == "local":
            name = target.name or ""
            if name in self.consts and name not in self.scope.locals:
                raise self.error(f"cannot assign to constant `{name}`", target.pos)
            if target.segments and name not in self.scope.locals:
                raise self.unknown_name(target)
            self.scope.locals.add(name)
            root = pyname("l_", name)
        else:
            root = target.root
        if _is_trivial(value) or _is_literal_code(value):
            result = value
        else:
            result = self.tmp()
            self.line(f"{result} = {value}", node.value, "")
        if not target.segments:
            self.line(f"{root} = {result}", node, target.text())
        elif (
            len(target.segments) == 1
            and isinstance(target.segments[0], ast.KeySeg)
            and target.root in ("event", "meta")
        ):
            self.line(f"{root}[{target.segments[0].key!r}] = {result}", node, target.text())
        else:
            keys = ", ".join(self.segment_key(s, False) for s in target.segments)
            self.line(f"{root} = _set_path({root}, [{keys}], {result})", node, target.text())
        return result

    def _x_Emit(self, node: ast.Emit, inline: bool) -> str:
        self._statement_only(node, inline)
        if not self.scope.allow_emit or self.scope.in_fn is not None:
            raise self.error("`emit` is only allowed in scripts", node.pos)
        value = "event" if node.value is None else self.expr(node.value)
        port = "None" if node.port is None else self.expr(node.port)
        self.line(f"return _R({port}, {value}, False, state, meta)", node, "emit")
        return "None"

    def _x_Drop(self, node: ast.Drop, inline: bool) -> str:
        self._statement_only(node, inline)
        if not self.scope.allow_emit or self.scope.in_fn is not None:
            raise self.error("`drop` is only allowed in scripts", node.pos)
        self.line("return _R(None, None, True, state, meta)", node, "drop")
        return "None"

    def _x_Merge(self, node: ast.Merge, inline: bool) -> str:
        code = f"_merge({self.expr(node.target, inline)}, {self.expr(node.value, inline)})"
        return code if inline else self.hoist(code, node, "merge")

    def _x_Patch(self, node: ast.Patch, inline: bool) -> str:
        self._statement_only(node, inline)
        rec = self.hoist(f"_patch_start({self.expr(node.target)})", node, "patch")
        for op in node.ops:
            key = "None" if op.key is None else self.expr(op.key)
            value = "None" if op.value is None else self.expr(op.value)
            self.line(f"_patch_apply({rec}, {op.op!r}, {key}, {value})", op, f"patch {op.op}")
        return rec

    def _x_For(self, node: ast.For, inline: bool) -> str:
        self._statement_only(node, inline)
        src = self.expr(node.target)
        appends = node.initial is None or (
            isinstance(node.initial, ast.ArrayLit) and not node.initial.items and node.fold == "+"
        )
        initial = "[]" if node.initial is None else self.expr(node.initial)
        acc = self.hoist(f"_own({initial})" if not appends else "[]", node)
        key_var, value_var = self.tmp(), self.tmp()
        self.line(f"for {key_var}, {value_var} in _items({src}):", node, "for")
        self.indent += 1
        done = self.tmp() if len(node.cases) > 1 else None
        if done:
            self.line(f"{done} = False")
        for i, case in enumerate(node.cases):
            opened = 0
            if done and i > 0:
                self.line(f"if not {done}:")
                self.indent += 1
                opened += 1
            for name, var in ((case.key, key_var), (case.value, value_var)):
                self.scope.locals.add(name)
                self.line(f"{pyname('l_', name)} = {self.owned(var)}")
            if case.guard is not None:
                self.line(f"if _bool({self.expr(case.guard)}):", case.guard, "when")
                self.indent += 1
                opened += 1
            self.branch_depth += 1
            value = self.block(case.body)
            self.branch_depth -= 1
            if appends:
                self.line(f"{acc}.append({value})", case)
            else:
                self.line(f"{acc} = _fold({node.fold!r}, {acc}, {value})", case, f"use {node.fold}")
                if node.fold in ("and", "or"):
                    self.line(f"if {acc} is {node.fold == 'or'}:")
                    self.line("    break")
            if done:
                self.line(f"{done} = True")
            self.indent -= opened
        self.indent -= 1
        return acc

    def _x_Match(self, node: ast.Match, inline: bool) -> str:
        self._statement_only(node, inline)
        subject = self.expr(node.target)
        if not subject.isidentifier():
            subject = self.hoist(subject, node.target)
        result = self.tmp()
        if any(case.guard is not None for case in node.cases):
            self.guarded_cases(node, subject, result)
        else:
            self.plain_cases(node, subject, result)
        return result

    def plain_cases(self, node: ast.Match, subject: str, result: str) -> None:
        """Cases without guards: one if/elif/else chain, the first matching pattern wins."""
        self.prefetch_fields(node.cases, subject)
        try:
            self._plain_chain(node, subject, result)
        finally:
            self.field_cache.pop(subject, None)

    def _plain_chain(self, node: ast.Match, subject: str, result: str) -> None:
        keyword = "if"
        for case in node.cases:
            cond, binds = self.pattern(case.pattern, subject)
            if cond == "True":
                self.line("else:" if keyword == "elif" else "if True:", case, "case")
            else:
                self.line(f"{keyword} {cond}:", case, "case")
            self.indent += 1
            for name, value in binds:
                self.scope.locals.add(name)
                self.line(f"{pyname('l_', name)} = {self.owned(value)}", case)
            self.branch_depth += 1
            self.line(f"{result} = {self.block(case.body)}", case)
            self.branch_depth -= 1
            self.indent -= 1
            if cond == "True":
                return
            keyword = "elif"
        self.line("else:")
        self.indent += 1
        self.line("_fail('no case matched and the match has no default case')", node, "match")
        self.indent -= 1

    def guarded_cases(self, node: ast.Match, subject: str, result: str) -> None:
        """Cases with `when` guards: a failed guard falls through to the next case."""
        done = self.tmp()
        self.line(f"{result} = None")
        self.line(f"{done} = False")
        self.match_cases(node.cases, self.binding_test(subject), result, done)
        self.line(f"if not {done}:")
        self.indent += 1
        self.line("_fail('no case matched and the match has no default case')", node, "match")
        self.indent -= 1

    def binding_test(self, subject: str) -> CaseTest:
        """A `match` case's test: its pattern against `subject`; what it binds is owned by the script."""

        def test(case: ast.Case) -> tuple[str, list[tuple[str, str]]]:
            cond, binds = self.pattern(case.pattern, subject)
            return cond, [(name, self.owned(value)) for name, value in binds]

        return test

    def match_cases(
        self, cases: Sequence[ast.Case], test: CaseTest, result: str, done: str, *, branches: bool = True
    ) -> None:
        """Cases tried in order until one matches and its guard holds; `done` says one did, `result` is its value.

        `test` gives a case's condition and the locals it binds (name, code), emitted
        where the case is tried. With `branches`, a body counts as a branch: a name
        unknown there fails only when the body runs (as in a `match`).
        """
        for i, case in enumerate(cases):
            opened = 0
            if i > 0:
                self.line(f"if not {done}:")
                self.indent += 1
                opened += 1
            cond, binds = test(case)
            if cond != "True":
                self.line(f"if {cond}:", case, "case")
                self.indent += 1
                opened += 1
            for name, code in binds:
                self.scope.locals.add(name)
                self.line(f"{pyname('l_', name)} = {code}", case)
            if case.guard is not None:
                guard = self.expr(case.guard)
                self.line(f"if _bool({guard}):", case.guard, "when")
                self.indent += 1
                opened += 1
            self.line(f"{done} = True")
            self.branch_depth += branches
            value = self.block(case.body)
            self.branch_depth -= branches
            self.line(f"{result} = {value}", case)
            self.indent -= opened

    # ------------------------------------------------------------ patterns
    def pattern(self, pat: ast.Pattern, subject: str) -> tuple[str, list[tuple[str, str]]]:
        """A Python condition testing `subject` against `pat`, and the locals it binds."""
        if isinstance(pat, ast.BindPattern):
            cond, binds = self.pattern(pat.pattern, subject)
            bound = self.bound_value(pat.pattern, subject)
            return cond, [*binds, (pat.name, bound)]
        if isinstance(pat, ast.BinaryPattern):
            parts = self.node_var("_b", pat)
            binds = [(n, f"{parts}[{i}]") for i, s in enumerate(pat.segments) if (n := pat.binding(s))]
            return self.test(pat, subject), binds
        return self.test(pat, subject), []

    def test(self, pat: ast.Pattern, s: str) -> str:
        if isinstance(pat, ast.AnyPattern):
            return "True"
        if isinstance(pat, ast.ExprPattern):
            value = self.pattern_value(pat.expr)
            if _is_plain_str(pat.expr):
                return _str_eq(s, pat.expr)
            return f"_eq({s}, {value})"
        if isinstance(pat, ast.ExtractorPattern):
            return f"({self.extractor_var(pat)} := {self.extractor(pat)}({s})) is not _M"
        if isinstance(pat, ast.RecordPattern):
            return self.record_test(pat, s)
        if isinstance(pat, ast.ArrayPattern):
            preds = [f"lambda _e: {self.test(e, '_e')}" for e in pat.elems]
            tail = f" and _arr({s}, ({', '.join(preds)},))" if preds else ""
            return f"(type({s}) is list{tail})"
        if isinstance(pat, ast.TuplePattern):
            n = len(pat.elems)
            parts = [f"type({s}) is list", f"len({s}) {'>=' if pat.open else '=='} {n}"]
            parts += [self.test(e, f"{s}[{i}]") for i, e in enumerate(pat.elems)]
            return "(" + " and ".join(p for p in parts if p != "True") + ")"
        if isinstance(pat, ast.BinaryPattern):
            cut = self.node_var("_b", pat)
            shape = tuple((seg.size, seg.types) for seg in pat.segments)
            checks = [
                f"_eq({cut}[{i}], {self.pattern_value(seg.value)})"
                for i, seg in enumerate(pat.segments)
                if pat.compares(seg)
            ]
            return "(" + " and ".join([f"({cut} := _binmatch({s}, {shape!r})) is not _M", *checks]) + ")"
        if isinstance(pat, ast.BindPattern):
            raise self.error("a binding `name = pattern` is only allowed at the top of a case", pat.pos)
        raise self.error(f"unsupported pattern {type(pat).__name__}", pat.pos)

    def record_test(self, pat: ast.RecordPattern, s: str) -> str:
        cache = self.field_cache.get(s)
        parts = [cache.is_dict if cache else f"type({s}) is dict"]
        for fp in pat.fields:
            key = repr(fp.key)
            field = cache.fields.get(fp.key) if cache else None
            got = field or f"{s}.get({key}, _M)"
            if fp.op == "present":
                parts.append(f"{field} is not _M" if field else f"{key} in {s}")
            elif fp.op == "absent":
                parts.append(f"{field} is _M" if field else f"{key} not in {s}")
            elif fp.op == "~":
                assert isinstance(fp.value, ast.ExtractorPattern)
                parts.append(self.test(fp.value, got))
            elif fp.op == "~=":
                assert isinstance(fp.value, ast.Pattern)
                sub = self.field_var(fp)
                parts.append(f"({sub} := {s}.get({key}, _M)) is not _M and {self.test(fp.value, sub)}")
            else:
                assert isinstance(fp.value, ast.Expr)
                value = self.pattern_value(fp.value)
                if fp.op == "==" and _is_plain_str(fp.value):
                    parts.append(_str_eq(got, fp.value))
                elif fp.op == "==":
                    parts.append(
                        f"{field} is not _M and _eq({field}, {value})"
                        if field
                        else f"{key} in {s} and _eq({s}[{key}], {value})"
                    )
                elif fp.op == "!=" and _is_plain_str(fp.value):
                    present = field or f"{s}[{key}]"
                    parts.append(
                        f"{field} is not _M and not {_str_eq(field, fp.value)}"
                        if field
                        else f"{key} in {s} and not {_str_eq(present, fp.value)}"
                    )
                else:
                    parts.append(f"_p{_BINARY_HELPERS[fp.op]}({got}, {value})")
        return "(" + " and ".join(parts) + ")"

    def prefetch_fields(self, cases: tuple[ast.Case, ...], subject: str) -> None:
        """Look up, once, every field the cases' record patterns test (a match over a few fields
        then costs one dict lookup per field, however many cases mention it)."""
        patterns = [c.pattern.pattern if isinstance(c.pattern, ast.BindPattern) else c.pattern for c in cases]
        records = [r for r in patterns if isinstance(r, ast.RecordPattern)]
        if len(records) < 2:
            return
        keys = list(dict.fromkeys(fp.key for r in records for fp in r.fields if fp.op != "~="))
        is_dict = self.tmp()
        cache = _FieldCache(is_dict, {k: self.tmp() for k in keys})
        self.line(f"{is_dict} = type({subject}) is dict")
        if keys:
            self.line(f"if {is_dict}:")
            self.indent += 1
            for key, var in cache.fields.items():
                self.line(f"{var} = {subject}.get({key!r}, _M)")
            self.indent -= 1
            self.line("else:")
            self.indent += 1
            self.line(" = ".join(cache.fields.values()) + " = _M")
            self.indent -= 1
        self.field_cache[subject] = cache

    def pattern_value(self, expr: ast.Expr) -> str:
        if _needs_statements(expr):
            raise self.error(
                "patterns can only compare with plain expressions",
                expr.pos,
                "compute the value with `let` before the match",
            )
        return self.expr(expr, inline=True)

    def extractor(self, pat: ast.ExtractorPattern) -> str:
        if pat.kind not in EXTRACTORS:
            raise self.error(
                f"unknown extractor `{pat.kind}`", pat.pos, "supported: " + ", ".join(sorted(EXTRACTORS))
            )
        try:
            fn = build_extractor(pat.kind, pat.text)
        except Exception as exc:  # noqa: BLE001 - a bad regex or format is the user's error
            raise self.error(f"invalid `{pat.kind}` extractor: {exc}", pat.pos) from None
        return self.add_global("_X", fn)

    def element_picker(self, pat: ast.Pattern) -> str:
        """A lambda giving what an array element pattern binds for one element, or MISSING."""
        if isinstance(pat, ast.ExtractorPattern):
            return f"lambda _e: {self.extractor(pat)}(_e)"
        return f"lambda _e: ({self.bound_value(pat, '_e')} if {self.test(pat, '_e')} else _M)"

    # Variables holding extraction results / nested subjects, keyed by node identity.
    def extractor_var(self, pat: ast.ExtractorPattern) -> str:
        return self.node_var("_e", pat)

    def field_var(self, fp: ast.FieldPred) -> str:
        return self.node_var("_s", fp)

    def node_var(self, prefix: str, node: ast.Node) -> str:
        """The variable tied to one pattern node (the same node always gets the same name)."""
        key = id(node)
        if key not in self.node_vars:
            self.node_vars[key] = f"{prefix}{next(self.counter)}"
        return self.node_vars[key]

    def bound_value(self, pat: ast.Pattern, s: str) -> str:
        """What `name = pattern` binds once `pattern` matched `s` (Tremor's pattern results).

        A record pattern binds a record of only the fields it extracted: `present`
        fields, extractor results and nested pattern results (comparisons and
        `absent` add nothing). An array pattern binds the `[index, value]` pairs
        each element pattern matched, pattern by pattern. A tuple pattern binds
        the per-position results; an extractor binds what it extracted.
        """
        if isinstance(pat, ast.ExtractorPattern):
            return self.extractor_var(pat)
        if isinstance(pat, ast.ArrayPattern):
            pickers = [self.element_picker(e) for e in pat.elems if not isinstance(e, ast.AnyPattern)]
            return f"_pairs({s}, ({', '.join(pickers)},))" if pickers else "[]"
        if isinstance(pat, ast.TuplePattern):
            items = [self.bound_value(e, f"{s}[{i}]") for i, e in enumerate(pat.elems)]
            return "[" + ", ".join(items) + "]"
        if isinstance(pat, ast.RecordPattern):
            return (
                "{"
                + ", ".join(self.record_binding(fp, s) for fp in pat.fields if fp.op in _BINDING_OPS)
                + "}"
            )
        if isinstance(pat, ast.ExprPattern):
            return self.pattern_value(pat.expr)
        return s

    def record_binding(self, fp: ast.FieldPred, s: str) -> str:
        """`key: value` of one field a matched record pattern extracted."""
        if fp.op == "present":
            return f"{fp.key!r}: {s}[{fp.key!r}]"
        if fp.op == "~":
            assert isinstance(fp.value, ast.ExtractorPattern)
            return f"{fp.key!r}: {self.extractor_var(fp.value)}"
        assert isinstance(fp.value, ast.Pattern)
        return f"{fp.key!r}: {self.bound_value(fp.value, self.field_var(fp))}"


_BINDING_OPS = ("present", "~", "~=")


def _source_of(pos: Position, source: SourceText | None) -> SourceText | None:
    """The text `pos` points into: usually the script's, else a module file's (for the caret line)."""
    if source is None or pos.file == source.name:
        return source
    try:
        return SourceText(pos.file, Path(pos.file).read_text(encoding="utf-8"))
    except OSError:
        return None


def _is_trivial(code: str) -> bool:
    return code.isidentifier() or code in ("None", "True", "False")


def _is_literal_code(code: str) -> bool:
    """Whether generated code is a Python literal (safe to repeat, no side effects)."""
    try:
        pyast.literal_eval(code)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


def _is_plain_str(node: ast.Expr) -> bool:
    return isinstance(node, ast.Literal) and type(node.value) is str


def _str_eq(subject: str, literal: ast.Expr) -> str:
    """`subject` equals a string literal: the same string, or a binary of its bytes (Tremor's `==`).
    The binary test only runs after the string test failed, so a match costs one comparison."""
    assert isinstance(literal, ast.Literal)
    text = literal.value
    return f"({subject} == {text!r} or ({subject}.__class__ is bytes and {subject} == {text.encode()!r}))"


def _keyword(node: ast.Node) -> str:
    return {
        ast.Match: "match",
        ast.For: "for",
        ast.Patch: "patch",
        ast.Let: "let",
        ast.Emit: "emit",
        ast.Drop: "drop",
    }.get(type(node), type(node).__name__.lower())


def _fn_of_cases(defn: ast.FnDefn) -> tuple[ast.Case, ...]:
    """`fn f(a, b) of case (x, 1) => ...`: bare names in the argument tuple bind the argument."""
    out = []
    for case in defn.cases or ():
        pat = case.pattern
        if isinstance(pat, ast.TuplePattern):
            elems = tuple(
                ast.BindPattern(e.pos, e.expr.name or "", ast.AnyPattern(e.pos))
                if isinstance(e, ast.ExprPattern)
                and isinstance(e.expr, ast.Path)
                and e.expr.root == "local"
                and not e.expr.segments
                else e
                for e in pat.elems
            )
            pat = ast.TuplePattern(pat.pos, elems, pat.open)
        out.append(ast.Case(case.pos, pat, case.guard, case.body))
    return tuple(out)


def _arguments_bound(case: ast.Case) -> tuple[ast.Case, list[tuple[int, ast.BindPattern]]]:
    """A case of a function of cases with its argument bindings taken out (they bind the arguments as they are)."""
    if not isinstance(case.pattern, ast.TuplePattern):
        return case, []
    pattern = case.pattern
    binds = [(i, e) for i, e in enumerate(pattern.elems) if isinstance(e, ast.BindPattern)]
    elems = tuple(ast.AnyPattern(e.pos) if isinstance(e, ast.BindPattern) else e for e in pattern.elems)
    return ast.Case(
        case.pos, ast.TuplePattern(pattern.pos, elems, pattern.open), case.guard, case.body
    ), binds


class FnCodegen:
    """Generates the Python function for one `fn` definition."""

    def __init__(self, gen: Codegen) -> None:
        self.gen = gen

    def define(self, name: str, defn: ast.FnDefn) -> None:
        """Emit the Python function for `defn`, callable as `name`."""
        gen = self.gen
        py = gen.fn_names[name]
        params = [pyname("l_", p) for p in defn.params] + (["*_va"] if defn.varargs else [])
        saved_copy, gen.copy_on_let = gen.copy_on_let, uses_nested_assignment(defn)
        scope = Scope(
            locals=set(defn.params), in_fn=py, fn_params=defn.params, allow_emit=False, varargs=defn.varargs
        )
        if defn.cases is None:
            gen.function(py, params, defn.body, scope, defn, "fn")
            gen.copy_on_let = saved_copy
            return
        saved, gen.scope = gen.scope, scope
        gen.line(f"def {py}({', '.join(params)}):", defn)
        gen.indent += 1
        if defn.varargs:
            gen.line("_va = list(_va)")
        named = params[: len(defn.params)]
        if gen.copy_on_let:
            for param in named:
                gen.line(f"{param} = _own({param})")
        subject = gen.hoist("[" + ", ".join(named) + "]", defn)
        result, done = gen.tmp(), gen.tmp()
        gen.line(f"{result} = None")
        gen.line(f"{done} = False")
        cases = _fn_of_cases(defn)
        binds_of: dict[int, list[tuple[int, ast.BindPattern]]] = {}
        flat = []
        for case in cases:
            stripped, binds = _arguments_bound(case)
            binds_of[id(stripped)] = binds
            flat.append(stripped)

        def test(case: ast.Case) -> tuple[str, list[tuple[str, str]]]:
            cond, _ = gen.pattern(case.pattern, subject)
            return cond, [(bind.name, f"{subject}[{index}]") for index, bind in binds_of[id(case)]]

        gen.match_cases(flat, test, result, done, branches=False)
        gen.line(f"if not {done}:")
        gen.indent += 1
        gen.line(f"_fail('no case of function `{defn.name}` matched its arguments')", defn, defn.name)
        gen.indent -= 1
        gen.line(f"return {result}")
        gen.indent -= 1
        gen.scope = saved
        gen.copy_on_let = saved_copy


def uses_nested_assignment(script: ast.Node) -> bool:
    """Whether the code can modify a value in place, so values bound elsewhere must be copies.

    `let $key = v` and `let event.key = v` only modify the metadata/event
    container itself, which matters only if that whole container is also read
    (`$`, `event`) and so could be shared.
    """
    nodes = list(walk(script))
    bare_roots = {n.root for n in nodes if isinstance(n, ast.Path) and not n.segments}
    for n in nodes:
        if not isinstance(n, ast.Let) or not n.target.segments:
            continue
        target = n.target
        if len(target.segments) > 1 or target.root not in ("event", "meta") or target.root in bare_roots:
            return True
    return False
