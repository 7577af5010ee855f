"""A batch of channel values (JSON bytes) parsed into Arrow columns, and the rows that must not be.

Each value is decoded on its own by msgspec into a Struct made from the plan's
schema (only the fields the plan reads; others are skipped): one C call per
row, and a row is never read together with its neighbours. msgspec is strict
where the per-event path (orjson) is: a value of another type than the
schema's (an int where a string is read, a float where an int is, a bool where
a number is), a record where a field is read whole or anything but a record
where one is read by member, a value that is not a record, a bad escape or
surrogate, a number beyond a double in a field it reads, invalid UTF-8 in a
string it reads, trailing content: each fails that row's decode, and the row
runs on the per-event executor. A repeated key is read as orjson reads it (the
last one wins), and every occurrence must have the schema's type. Numbers read
as float64 take ints too (rounded to doubles, as pyarrow's reader did before:
`evaluate` compares them only with literals that keep their order); int64
fields are checked for range when the column is built. A key holding a quote,
a backslash or a control character cannot be a msgspec field: every row of
such a plan runs per event.

msgspec accepts a few things in the fields it skips that orjson rejects, so
the batch is scanned for them as a whole (`_unlike_orjson`), and the rows
found fall back:
- invalid UTF-8 anywhere in the row (a key, a skipped string): the batch's
  cast to Arrow text checks every row;
- a number beyond a double (`1e999`) in a skipped field: only possible where
  a digit is followed by `e`/`E` and a digit or `+`, or in a run of
  `LONG_NUMBER` digits; those rare rows (one polars regex) are checked with
  orjson itself;
- nesting deep enough to come near either decoder's limit (rows holding at
  least `DEEP` opening brackets);
- `"$bytes"` (binary values decode differently per event).

Rows are decoded one by one, not joined into one JSON array: a row that is
not one whole value (`{"a":[[1`) could be completed by the next one in an
array, and another row holding two values (`{},{}`) would keep the count.

The table holds nulls on every row that falls back, as it always has.
"""

from __future__ import annotations

import functools
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

# Rows with at least this many `[`/`{` fall back: far from orjson's depth limit (1024) and from
# Python's recursion limit, which both decoders also count against.
DEEP = 256
# A schema field no event has: an empty schema still checks that each row is a record, and the
# table keeps one row per value.
_NO_FIELD = pa.field("\x00contraflow-columnar", pa.null())
# What a failing decode raises: msgspec's errors (ValueError), invalid UTF-8 in a string it reads
# (UnicodeDecodeError), a null value (TypeError), nesting beyond Python's recursion limit.
_DECODE_ERRORS = (ValueError, TypeError, RecursionError)
_BYTES_MARK = b'"$bytes"'
# A number with this many digits in a row can exceed a double (1.8e308) without an exponent.
LONG_NUMBER = 309
INT64 = (-(2**63), 2**63 - 1)
# A digit, `e`/`E`, then a digit or `+`: where a number shorter than LONG_NUMBER digits can exceed a
# double (a negative exponent cannot).
_EXPONENT = "[0-9][eE][0-9+]"
# Rows decoded at a time. Their Python objects (each row's bytes, its Struct and its fields' values)
# are gone before the next piece's are made, so the interpreter's allocator reuses their memory
# instead of mapping fresh pages for a whole batch's worth and giving them back after it, a page
# fault on every page each batch.
PIECE_ROWS = 2048


@dataclass
class Parsed:
    """The batch's fields as an Arrow table (one row per value) and the rows to run per event."""

    table: pa.Table
    fallback: pa.BooleanArray


def parse_values(values: pa.Array, schema: pa.Schema, fallback: pa.BooleanArray) -> Parsed:
    """Parse `values` against `schema`; `fallback` marks rows already known to need the executor."""
    values = values.cast(pa.binary()) if values.type != pa.binary() else values
    schema = schema if len(schema) else pa.schema([_NO_FIELD])
    reader = _reader(schema)
    if reader is None:  # a key msgspec cannot name: every row runs per event
        nulls = pa.table([pa.nulls(len(values), f.type) for f in schema], schema=schema)
        return Parsed(nulls, pa.repeat(pa.scalar(True), len(values)))
    known = np.flatnonzero(fallback.to_numpy(zero_copy_only=False)).tolist()
    excluded = sorted({*_unlike_orjson(values), *known})
    out = set(excluded)
    pieces = []
    for start in range(0, len(values), PIECE_ROWS):
        rows = values.slice(start, PIECE_ROWS).to_pylist()
        skipped = excluded[bisect_left(excluded, start) : bisect_left(excluded, start + len(rows))]
        pieces.append(_piece(rows, start, skipped, schema, reader, out))
    table = pa.concat_tables(pieces).combine_chunks() if pieces else _table([], schema)[0]
    return Parsed(table, _mask(len(values), out))


def _piece(
    rows: list[bytes | None],
    start: int,
    skipped: list[int],
    schema: pa.Schema,
    reader: _Reader,
    out: set[int],
) -> pa.Table:
    """Rows `start`.. of the batch as a table of `schema`, null on the `skipped` rows and on those
    that fail here (added to `out`)."""
    records, failed = _decode(rows, reader.decode, reader.empty)
    for row in skipped:
        records[row - start] = reader.empty
    table, overflowing = _table(records, schema)
    if overflowing:  # an int beyond int64: its row falls back, and every field of it is null
        for row in overflowing:
            records[row] = reader.empty
        table, _ = _table(records, schema)
    out.update(start + row for row in (*failed, *overflowing))
    return table


@dataclass(frozen=True)
class _Reader:
    """A schema's decoder: `decode` makes one row's Struct; `empty` is a row with every field null."""

    decode: Callable[[bytes], Any]
    empty: Any


@functools.lru_cache(maxsize=64)
def _reader(schema: pa.Schema) -> _Reader | None:
    """None when a key read holds a quote, a backslash or a control character (msgspec's field
    names may not)."""
    try:
        record = _struct_type("Record", list(schema))
    except ValueError:
        return None
    return _Reader(msgspec.json.Decoder(record).decode, record())


def _struct_type(name: str, fields: Sequence[pa.Field]) -> type[msgspec.Struct]:
    """A Struct whose attribute `f<i>` reads JSON key `fields[i].name` (a key need not be an
    identifier), typed as the field's Arrow type, null or missing read as None."""
    read = [(i, f) for i, f in enumerate(fields) if not pa.types.is_null(f.type)]  # null: a column of nulls
    attributes = [(f"f{i}", _python_type(f.type), None) for i, f in read]
    renamed = {f"f{i}": f.name for i, f in read}
    # gc=False: decoded values hold no cycles, and tracking a Struct per row cost time for nothing.
    return msgspec.defstruct(name, attributes, rename=renamed, gc=False)


def _python_type(dtype: pa.DataType) -> Any:
    if pa.types.is_struct(dtype):
        return _struct_type("Member", list(dtype)) | None
    found = {pa.string(): str, pa.float64(): float, pa.int64(): int, pa.bool_(): bool}.get(dtype)
    if found is None:
        raise TypeError(f"no JSON reading for Arrow type {dtype}")  # `FieldTypes.schema` makes no other
    return found | None


def _decode(
    rows: list[bytes | None], decode: Callable[[bytes], Any], empty: Any
) -> tuple[list[Any], list[int]]:
    """Each row decoded (`empty` where it fails), and the rows that failed."""
    records: list[Any] = []
    append = records.append
    failed = []
    for row in rows:
        try:
            append(decode(row))  # type: ignore[arg-type]  # a null row raises TypeError: it falls back
        except _DECODE_ERRORS:
            failed.append(len(records))
            append(empty)
    return records, failed


def _table(records: list[Any], schema: pa.Schema) -> tuple[pa.Table, list[int]]:
    """The records' fields as columns, and the rows holding an int beyond int64 (null here)."""
    overflowing: list[int] = []
    columns = [_column(records, i, f.type, overflowing, nested=False) for i, f in enumerate(schema)]
    return pa.table(columns, schema=schema), overflowing


def _column(
    records: list[Any], index: int, dtype: pa.DataType, overflowing: list[int], nested: bool
) -> pa.Array:
    """Attribute `f<index>` of each record as a column of `dtype` (`nested`: the records are a
    struct field's values, None where the struct is null)."""
    if pa.types.is_null(dtype):  # not a Struct attribute: nulls
        return pa.nulls(len(records))
    getter = attrgetter(f"f{index}")
    items = (
        [None if r is None else getter(r) for r in records] if None in records else list(map(getter, records))
    )
    if pa.types.is_struct(dtype):
        members = [_column(items, i, child.type, overflowing, nested=True) for i, child in enumerate(dtype)]
        absent = pa.array([item is None for item in items], pa.bool_())
        return pa.StructArray.from_arrays(members, fields=list(dtype), mask=absent)
    try:
        return pa.array(items, dtype)
    except (OverflowError, pa.ArrowInvalid):  # only an int64 field can fail: msgspec typed the rest
        overflowing += [
            row for row, item in enumerate(items) if item is not None and not INT64[0] <= item <= INT64[1]
        ]
        return pa.nulls(len(items), dtype)


def _unlike_orjson(values: pa.Array) -> list[int]:
    """Rows msgspec decodes but orjson would reject or read otherwise (see the module docstring),
    found by whole-batch scans; rows are looked at one by one only where a scan points at them."""
    data = values.buffers()[2]
    if not len(values) or data is None:
        return []
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[
        values.offset : values.offset + len(values) + 1
    ]
    lengths = np.diff(offsets)
    found, text = _as_text(values)
    numbers = pl.Series(text).str.contains(_EXPONENT)
    if int(lengths.max()) >= LONG_NUMBER:
        numbers = numbers | pl.Series(text).str.contains(f"[0-9]{{{LONG_NUMBER}}}")
    found += [row for row in numbers.arg_true().to_list() if not _orjson_accepts(values[row].as_py())]
    start = int(offsets[0])
    everything = data.slice(start, int(offsets[-1]) - start).to_pybytes()
    if b"$" in everything:  # rare: look for the mark itself
        marks = _occurrences(everything, _BYTES_MARK)
        found += np.unique(np.searchsorted(offsets - start, marks, side="right") - 1).tolist()
    found += [
        row for row in np.flatnonzero(lengths >= DEEP).tolist() if _openings(values[row].as_py()) >= DEEP
    ]
    return found


def _as_text(values: pa.Array) -> tuple[list[int], pa.Array]:
    """The rows that are not valid UTF-8, and the values as text (those rows made `{}`)."""
    try:
        return [], values.cast(pa.string())
    except pa.ArrowInvalid:
        rows = values.to_pylist()
        invalid = [row for row, value in enumerate(rows) if value is not None and not _utf8(value)]
        blank = pc.if_else(_mask(len(values), set(invalid)), pa.scalar(b"{}", pa.binary()), values)
        return invalid, blank.cast(pa.string())


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _occurrences(text: bytes, needle: bytes) -> list[int]:
    found = []
    at = text.find(needle)
    while at >= 0:
        found.append(at)
        at = text.find(needle, at + 1)
    return found


def _openings(value: bytes | None) -> int:
    return 0 if value is None else value.count(b"[") + value.count(b"{")


def _orjson_accepts(value: bytes | None) -> bool:
    if value is None:
        return False
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return True


def _mask(count: int, rows: set[int]) -> pa.BooleanArray:
    flags = np.zeros(count, dtype=bool)
    flags[list(rows)] = True
    return pa.array(flags, pa.bool_())


def parsed_from_table(table: pa.Table, schema: pa.Schema, fallback: pa.BooleanArray) -> Parsed | None:
    """The batch as `parse_values` would parse it, taken from `table`, which holds the same rows
    (a `python::batch`'s result, written out as the values): its columns of `schema`'s top-level
    fields, where each converts exactly (None otherwise: parse the values instead)."""
    columns = []
    for target in schema:
        if target.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, target.type))  # left out of every row: null
            continue
        column = _exactly(table.column(target.name).combine_chunks(), target.type)
        if column is None:
            return None
        columns.append(column)
    return Parsed(pa.table(columns, schema=schema), fallback)


def _exactly(column: pa.Array, target: pa.DataType) -> pa.Array | None:
    """`column` as the JSON reader would read its JSON text as `target`, or None when it may not
    (a type the text would read otherwise, NaN or infinity written as null, an unsigned 64-bit)."""
    source = column.type
    if pa.types.is_null(source):
        return pa.nulls(len(column), target)
    if target == pa.string() and (pa.types.is_string(source) or pa.types.is_large_string(source)):
        return column.cast(target)
    if target == pa.bool_() and pa.types.is_boolean(source):
        return column
    integer = pa.types.is_integer(source) and source != pa.uint64()
    if target == pa.int64() and integer:
        return column.cast(target)
    if target == pa.float64() and (integer or pa.types.is_floating(source)):
        if pa.types.is_floating(source) and not pc.all(pc.is_finite(column)).as_py():
            return None
        try:
            return column.cast(target)
        except pa.ArrowInvalid:  # an integer a double does not hold exactly
            return None
    return None
