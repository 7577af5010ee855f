"""A reference tree-walking interpreter for tremor-script.

Deliberately simple: it evaluates the syntax tree node by node for every
event. It is the baseline the compiler is benchmarked against, and the
conformance suite runs cases through both to check that the compiler's
specialisations do not change behaviour. Not used in pipelines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contraflow.lang.errors import LangError, ScriptRuntimeError
from contraflow.lang.script import ast, stdlib, values
from contraflow.lang.script.extractors import EXTRACTORS, build_extractor
from contraflow.lang.script.modules import ModuleResolver, bind_uses, qualify
from contraflow.lang.script.results import Env, ScriptResult


class _Emit(Exception):
    def __init__(self, value: Any, port: Any) -> None:
        self.value = value
        self.port = port


class _Drop(Exception):
    pass


class _Frame(Env):
    """Everything an expression can see while one event is being processed: `Env`'s slots and a function's own."""

    __slots__ = ("in_fn", "locals", "varargs")

    def __init__(
        self,
        *slots: Any,
        fn_locals: dict[str, Any] | None = None,
        in_fn: ast.FnDefn | None = None,
        varargs: list[Any] | None = None,
        **named: Any,
    ) -> None:
        super().__init__(*slots, **named)
        self.locals: dict[str, Any] = {} if fn_locals is None else fn_locals
        self.in_fn = in_fn
        self.varargs: list[Any] = [] if varargs is None else varargs


class Interpreter:
    """Runs a parsed script by walking its tree."""

    def __init__(
        self,
        script: ast.Script,
        *,
        name: str = "<script>",
        consts: Mapping[str, Any] | None = None,
        fns: Mapping[str, ast.FnDefn] | None = None,
        modules: ModuleResolver | None = None,
    ) -> None:
        self.script = script
        self.name = name
        bound = bind_uses(script.uses, modules)
        self.aliases = bound.aliases
        self.fns: dict[str, ast.FnDefn] = {**(fns or {}), **bound.fns}
        self.fns.update({f.name: f for f in script.fns})
        self.consts: dict[str, Any] = {**(consts or {}), **bound.consts}
        self._extractors: dict[int, Any] = {}
        for const in script.consts:
            frame = _Frame()
            self.consts[const.name] = self.eval(const.value, frame)

    def run(self, *slots: Any, **named: Any) -> ScriptResult:
        """Run the script on one event (`Env`'s arguments)."""
        frame = _Frame(*slots, **named)
        expr: ast.Expr | None = None
        try:
            value: Any = None
            for expr in self.script.exprs:
                value = self.eval(expr, frame)
            if self.script.result_const is not None:
                value = self.consts[self.script.result_const]
        except _Emit as emit:
            return ScriptResult(emit.port, emit.value, False, frame.state, frame.meta)
        except _Drop:
            return ScriptResult(None, None, True, frame.state, frame.meta)
        except ScriptRuntimeError as err:
            raise ScriptRuntimeError(err.message, err.position, self.name, self.script.source) from err
        except RecursionError as err:
            where = expr.pos if expr is not None else None
            raise ScriptRuntimeError(
                "maximum recursion depth exceeded", where, self.name, self.script.source
            ) from err
        return ScriptResult(None, value, False, frame.state, frame.meta)

    # ------------------------------------------------------------ evaluation
    def eval(self, node: ast.Expr, frame: _Frame) -> Any:
        try:
            method = getattr(self, f"_e_{type(node).__name__}")
            return method(node, frame)
        except ScriptRuntimeError as err:
            if err.position is None:
                raise ScriptRuntimeError(err.message, node.pos, self.name) from err
            raise

    def _e_Literal(self, node: ast.Literal, frame: _Frame) -> Any:
        return node.value

    def _e_Interpolated(self, node: ast.Interpolated, frame: _Frame) -> Any:
        return values.interpolate(*(p if isinstance(p, str) else self.eval(p, frame) for p in node.parts))

    def _e_RecordLit(self, node: ast.RecordLit, frame: _Frame) -> Any:
        return {values.to_text(self.eval(k, frame)): self.eval(v, frame) for k, v in node.fields}

    def _e_ArrayLit(self, node: ast.ArrayLit, frame: _Frame) -> Any:
        return [self.eval(i, frame) for i in node.items]

    def _e_Unary(self, node: ast.Unary, frame: _Frame) -> Any:
        return values.UNARY[node.op](self.eval(node.operand, frame))

    def _e_Binary(self, node: ast.Binary, frame: _Frame) -> Any:
        if node.op in ("and", "or"):
            left = values.bool_operand(self.eval(node.left, frame))
            if left == (node.op == "or"):
                return left
            return values.bool_operand(self.eval(node.right, frame))
        return values.BINARY[node.op](self.eval(node.left, frame), self.eval(node.right, frame))

    def _root(self, path: ast.Path, frame: _Frame) -> Any:
        if path.root == "local":
            name = path.name or ""
            if name in frame.locals:
                return frame.locals[name]
            if name in self.consts:
                return self.consts[name]
            values.unknown_name(name)
        if path.root == "args" and frame.in_fn is not None and frame.in_fn.varargs:
            return frame.varargs
        return getattr(frame, path.root)

    def _e_Path(self, node: ast.Path, frame: _Frame) -> Any:
        value = self._root(node, frame)
        for seg in node.segments:
            if isinstance(seg, ast.KeySeg):
                value = values.get_key(value, seg.key)
            elif isinstance(seg, ast.IndexSeg):
                value = values.get_index(value, self.eval(seg.index, frame))
            else:
                value = values.get_range(value, self.eval(seg.start, frame), self.eval(seg.end, frame))
        return value

    def _e_BinaryLit(self, node: ast.BinaryLit, frame: _Frame) -> Any:
        return values.build_binary(*((self.eval(s.value, frame), s.size, s.types) for s in node.segments))

    def _e_ExprPath(self, node: ast.ExprPath, frame: _Frame) -> Any:
        value = self.eval(node.target, frame)
        for seg in node.segments:
            if isinstance(seg, ast.RangeSeg):
                value = values.get_range(value, self.eval(seg.start, frame), self.eval(seg.end, frame))
            else:
                key = seg.key if isinstance(seg, ast.KeySeg) else self.eval(seg.index, frame)
                value = values.get_index(value, key)
        return value

    def _e_Present(self, node: ast.Present, frame: _Frame) -> Any:
        path = node.path
        if path.root == "local" and path.name not in frame.locals and path.name not in self.consts:
            found = False
        else:
            value = self._root(path, frame)
            for seg in path.segments:
                if isinstance(seg, ast.RangeSeg):
                    start, end = self.eval(seg.start, frame), self.eval(seg.end, frame)
                    value = values.range_present(value, start, end)
                    continue
                key = seg.key if isinstance(seg, ast.KeySeg) else self.eval(seg.index, frame)
                value = values.lookup(value, key)
            found = value is not values.MISSING
        return not found if node.absent else found

    def _e_Call(self, node: ast.Call, frame: _Frame) -> Any:
        args = [self.eval(a, frame) for a in node.args]
        name = node.name
        if name == "recur" and frame.in_fn is not None:
            return self.call_fn(frame.in_fn, args)
        if name in self.fns:
            return self.call_fn(self.fns[name], args)
        fn = stdlib.lookup(qualify(name, self.aliases))
        if fn is None:
            raise LangError(f"unknown function `{name}`", node.pos)
        return fn.fn(*args)

    def call_fn(self, defn: ast.FnDefn, args: list[Any]) -> Any:
        own_args = [values.copy_value(a) for a in args]
        n = len(defn.params)
        named = dict(zip(defn.params, own_args[:n], strict=True))
        frame = _Frame(fn_locals=named, in_fn=defn, varargs=own_args[n:])
        if defn.cases is None:
            return self.block(defn.body, frame)
        for case in defn.cases:
            pat = case.pattern
            if isinstance(pat, ast.TuplePattern) and not self.fn_args_match(pat, args, frame):
                continue
            if case.guard is not None and not self.truth(case.guard, frame):
                continue
            return self.block(case.body, frame)
        raise ScriptRuntimeError(
            f"no case of function `{defn.name}` matched its arguments", defn.pos, self.name
        )

    def fn_args_match(self, pat: ast.TuplePattern, args: list[Any], frame: _Frame) -> bool:
        args = args[: len(frame.in_fn.params)] if frame.in_fn is not None else args
        if len(args) < len(pat.elems) or (not pat.open and len(args) != len(pat.elems)):
            return False
        for elem, arg in zip(pat.elems, args, strict=False):
            if (
                isinstance(elem, ast.ExprPattern)
                and isinstance(elem.expr, ast.Path)
                and elem.expr.root == "local"
                and not elem.expr.segments
            ):
                frame.locals[elem.expr.name or ""] = arg
            elif not self.matches(elem, arg, frame)[0]:
                return False
        return True

    def truth(self, guard: ast.Expr, frame: _Frame) -> bool:
        """A `when` guard's value, which must be a bool (errors point at the guard)."""
        value = self.eval(guard, frame)
        try:
            return values.bool_operand(value)
        except ScriptRuntimeError as err:
            raise ScriptRuntimeError(err.message, guard.pos, self.name) from err

    def block(self, body: tuple[ast.Expr, ...], frame: _Frame) -> Any:
        value: Any = None
        for expr in body:
            value = self.eval(expr, frame)
        return value

    def _e_Let(self, node: ast.Let, frame: _Frame) -> Any:
        value = values.copy_value(self.eval(node.value, frame))
        target = node.target
        keys = [
            seg.key if isinstance(seg, ast.KeySeg) else self.eval(seg.index, frame)  # type: ignore[union-attr]
            for seg in target.segments
        ]
        if target.root == "local":
            name = target.name or ""
            if keys:
                frame.locals[name] = values.set_path(frame.locals[name], keys, value)
            else:
                frame.locals[name] = value
        else:
            setattr(frame, target.root, values.set_path(getattr(frame, target.root), keys, value))
        return value

    def _e_Emit(self, node: ast.Emit, frame: _Frame) -> Any:
        value = frame.event if node.value is None else self.eval(node.value, frame)
        port = None if node.port is None else self.eval(node.port, frame)
        raise _Emit(value, port)

    def _e_Drop(self, node: ast.Drop, frame: _Frame) -> Any:
        raise _Drop()

    def _e_Merge(self, node: ast.Merge, frame: _Frame) -> Any:
        return values.merge_expr(self.eval(node.target, frame), self.eval(node.value, frame))

    def _e_Patch(self, node: ast.Patch, frame: _Frame) -> Any:
        rec = values.patch_start(self.eval(node.target, frame))
        for op in node.ops:
            key = None if op.key is None else self.eval(op.key, frame)
            value = None if op.value is None else self.eval(op.value, frame)
            try:
                values.patch_apply(rec, op.op, key, value)
            except ScriptRuntimeError as err:
                raise ScriptRuntimeError(err.message, op.pos, self.name) from err
        return rec

    def _e_For(self, node: ast.For, frame: _Frame) -> Any:
        target = self.eval(node.target, frame)
        acc: Any = [] if node.initial is None else values.copy_value(self.eval(node.initial, frame))
        op = node.fold or "+"
        for key, value in values.items_of(target):
            for case in node.cases:
                frame.locals[case.key] = key
                frame.locals[case.value] = values.copy_value(value)
                if case.guard is None or self.truth(case.guard, frame):
                    result = self.block(case.body, frame)
                    try:
                        acc = values.fold_step(op, acc, result)
                    except ScriptRuntimeError as err:
                        raise ScriptRuntimeError(err.message, case.pos, self.name) from err
                    break
            if op in ("and", "or") and acc is (op == "or"):
                break
        return acc

    def _e_Match(self, node: ast.Match, frame: _Frame) -> Any:
        subject = self.eval(node.target, frame)
        for case in node.cases:
            try:
                ok, bound = self.matches(case.pattern, subject, frame)
            except ScriptRuntimeError as err:  # a comparison in the pattern: located at its case
                if err.position is not None:
                    raise
                raise ScriptRuntimeError(err.message, case.pos, self.name) from err
            if not ok:
                continue
            frame.locals.update({k: values.copy_value(v) for k, v in bound.items()})
            if case.guard is not None and not self.truth(case.guard, frame):
                continue
            return self.block(case.body, frame)
        values.fail("no case matched and the match has no default case")

    # ------------------------------------------------------------ patterns
    def matches(self, pat: ast.Pattern, value: Any, frame: _Frame) -> tuple[bool, dict[str, Any]]:
        """Whether `value` matches, and the locals a binding introduces."""
        if isinstance(pat, ast.BindPattern):
            ok, extracted = self.test(pat.pattern, value, frame)
            return ok, ({pat.name: extracted} if ok else {})
        if isinstance(pat, ast.BinaryPattern):
            parts = self.binary_parts(pat, value, frame)
            if parts is None:
                return False, {}
            return True, {n: v for s, v in zip(pat.segments, parts, strict=True) if (n := pat.binding(s))}
        return self.test(pat, value, frame)[0], {}

    def binary_parts(self, pat: ast.BinaryPattern, value: Any, frame: _Frame) -> list[Any] | None:
        """The segments' values when `value` fits the binary pattern, else None."""
        parts = values.match_binary(value, tuple((s.size, s.types) for s in pat.segments))
        if parts is values.MISSING:
            return None
        for seg, part in zip(pat.segments, parts, strict=True):
            if pat.compares(seg) and not values.eq(part, self.eval(seg.value, frame)):
                return None
        return list(parts)

    def test(self, pat: ast.Pattern, value: Any, frame: _Frame) -> tuple[bool, Any]:
        """(matched, what a binding of this pattern sees: see `Codegen.bound_value`)."""
        if isinstance(pat, ast.AnyPattern):
            return True, value
        if isinstance(pat, ast.ExprPattern):
            expected = self.eval(pat.expr, frame)
            return values.eq(value, expected), expected
        if isinstance(pat, ast.ExtractorPattern):
            result = self.extractor(pat)(value)
            return result is not values.MISSING, result
        if isinstance(pat, ast.RecordPattern):
            return self.record_test(pat, value, frame)
        if isinstance(pat, ast.ArrayPattern):
            return self.array_test(pat, value, frame)
        if isinstance(pat, ast.BinaryPattern):
            return self.binary_parts(pat, value, frame) is not None, value
        if isinstance(pat, ast.TuplePattern):
            if type(value) is not list:
                return False, value
            n = len(pat.elems)
            if len(value) < n or (not pat.open and len(value) != n):
                return False, value
            bound = []
            for elem, item in zip(pat.elems, value, strict=False):
                ok, got = self.test(elem, item, frame)
                if not ok:
                    return False, value
                bound.append(got)
            return True, bound
        raise LangError(f"unsupported pattern {type(pat).__name__}", pat.pos)

    def array_test(self, pat: ast.ArrayPattern, value: Any, frame: _Frame) -> tuple[bool, Any]:
        if type(value) is not list:
            return False, value
        pairs: list[Any] = []
        for elem in pat.elems:
            found = [[i, got] for i, x in enumerate(value) for ok, got in [self.test(elem, x, frame)] if ok]
            if not found:
                return False, value
            if not isinstance(elem, ast.AnyPattern):
                pairs.extend(found)
        return True, pairs

    def record_test(self, pat: ast.RecordPattern, value: Any, frame: _Frame) -> tuple[bool, Any]:
        if type(value) is not dict:
            return False, value
        extracted: dict[str, Any] = {}
        for fp in pat.fields:
            present = fp.key in value
            if fp.op == "present":
                ok = present
                if ok:
                    extracted[fp.key] = value[fp.key]
            elif fp.op == "absent":
                ok = not present
            elif not present:
                ok = False
            elif fp.op in ("~", "~="):
                assert isinstance(fp.value, ast.Pattern)
                ok, extracted[fp.key] = self.test(fp.value, value[fp.key], frame)
            else:
                assert isinstance(fp.value, ast.Expr)
                ok = bool(values.BINARY[fp.op](value[fp.key], self.eval(fp.value, frame)))
            if not ok:
                return False, value
        return True, extracted

    def extractor(self, pat: ast.ExtractorPattern) -> Any:
        key = id(pat)
        if key not in self._extractors:
            if pat.kind not in EXTRACTORS:
                raise LangError(f"unknown extractor `{pat.kind}`", pat.pos)
            self._extractors[key] = build_extractor(pat.kind, pat.text)
        return self._extractors[key]
