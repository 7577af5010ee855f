"""Which fields of the input events a columnar plan reads, and as which Arrow types.

How a field is used decides its type: compared with a string -> string,
with a number -> a number, with a bool (or used as one) -> bool. A field whose
value is written out (a record field, `let $key = event.x`, a select target)
must also keep its exact JSON type, which the query does not say: the first
events of each batch do (`schema`), int64 / string / bool only (a float's
JSON text is orjson's to format; records and arrays are not columns here).
The parser then enforces the schema row by row (see `parse`), so a row of
another type falls back instead of being converted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from contraflow.pipeline.columnar.ir import (
    Compare,
    Const,
    Expr,
    Field,
    Logic,
    Match,
    Not,
    NotVectorizable,
    Record,
)
from contraflow.pipeline.columnar.lowering import kind

FieldPath = tuple[str, ...]
_FIXED = {"string": pa.string(), "number": pa.float64(), "bool": pa.bool_()}
# A number field that is also written out must be an integer: int64 (exact) compares as a number too.
_SAMPLED = {int: pa.int64(), str: pa.string(), bool: pa.bool_()}
_ACCEPTS = {"number": (int,), "string": (str,), "bool": (bool,)}
# Events looked at to find the type of a written-out field.
SAMPLE = 8


@dataclass(frozen=True)
class FieldTypes:
    """Each field read, with what its uses ask of it (`string`, `number`, `bool`, `output`)."""

    uses: dict[FieldPath, frozenset[str]]

    @classmethod
    def of(cls, exprs: Iterable[Expr]) -> FieldTypes:
        """The fields `exprs` read (conditions and values written out alike)."""
        uses: dict[FieldPath, set[str]] = {}
        for expr in exprs:
            _collect(expr, uses, output=True)
        for path in uses:
            if any(other[: len(path)] == path for other in uses if other != path):
                raise NotVectorizable(f"field {'.'.join(path)} read whole and by member")
        found = {path: frozenset(kinds) for path, kinds in uses.items()}
        for kinds in found.values():
            if len(kinds - {"output"}) > 1:
                raise NotVectorizable("one field compared as different types")
        return cls(found)

    def schema(self, sample: Sequence[bytes]) -> pa.Schema | None:
        """The explicit schema to parse a batch with; None when its first events leave a written-out
        field's type open or unsupported (the batch then runs per event)."""
        types: dict[FieldPath, pa.DataType] = {}
        decoded: list[Any] | None = None
        for path, kinds in self.uses.items():
            if "output" not in kinds:
                (only,) = kinds
                types[path] = _FIXED[only]
                continue
            if decoded is None:
                decoded = _decode(sample)
            found = _sampled_type(decoded, path)
            if found is None or not all(found in _ACCEPTS.get(k, (found,)) for k in kinds):
                return None
            types[path] = _SAMPLED[found]
        return _nest(types)


_READS = {
    "string": (pa.string(),),
    "number": (pa.float64(), pa.int64()),
    "bool": (pa.bool_(),),
    "output": (pa.string(), pa.int64(), pa.bool_()),
}


def readable(types: FieldTypes, schema: pa.Schema) -> bool:
    """Whether a batch parsed with `schema` has every field `types` reads, typed for each use (so
    an expression that was not part of the plan can still be evaluated on that batch)."""
    for path, kinds in types.uses.items():
        dtype: Any = schema
        for key in path:
            index = dtype.get_field_index(key) if isinstance(dtype, pa.Schema | pa.StructType) else -1
            if index < 0:
                return False
            dtype = dtype.field(index).type
        if not all(dtype in _READS[kind] for kind in kinds):
            return False
    return True


def _collect(expr: Expr, uses: dict[FieldPath, set[str]], output: bool) -> None:
    if isinstance(expr, Field):
        if not output:  # `lower_bool` turns bare fields into comparisons: never reached
            raise NotVectorizable("field used without a type")
        uses.setdefault(expr.path, set()).add("output")
    elif isinstance(expr, Compare):
        uses.setdefault(expr.field.path, set()).add(kind(expr.literal.value))
    elif isinstance(expr, Logic):
        _collect(expr.left, uses, False)
        _collect(expr.right, uses, False)
    elif isinstance(expr, Not):
        _collect(expr.operand, uses, False)
    elif isinstance(expr, Match):
        uses.setdefault(expr.subject.path, set()).update(kind(c.value) for c, _ in expr.cases)
        for _, body in expr.cases:
            _collect(body, uses, output)
        if expr.default is not None:
            _collect(expr.default, uses, output)
    elif isinstance(expr, Record):
        for value in (*(value for _, value in expr.fields), *expr.shadowed):
            _collect(value, uses, True)
    else:
        assert isinstance(expr, Const)


def _decode(sample: Sequence[bytes]) -> list[Any]:
    out = []
    for raw in sample[:SAMPLE]:
        try:
            out.append(orjson.loads(raw))
        except orjson.JSONDecodeError:
            continue
    return out


def _sampled_type(events: list[Any], path: FieldPath) -> type | None:
    """The Python type of the first non-null value at `path` among `events`, if a supported one."""
    for event in events:
        value = event
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            continue
        found = type(value)
        if found is int and not -(2**63) <= value < 2**63:
            return None
        return found if found in _SAMPLED else None
    return None


def _nest(types: dict[FieldPath, pa.DataType]) -> pa.Schema:
    """`{("a", "b"): t}` as the schema `a: struct<b: t>`."""
    tree: dict[str, Any] = {}
    for path, dtype in types.items():
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = dtype

    def build(node: dict[str, Any]) -> list[pa.Field]:
        return [pa.field(k, pa.struct(build(v)) if isinstance(v, dict) else v) for k, v in node.items()]

    return pa.schema(build(tree))
