"""A batch of channel values (JSON bytes) parsed into Arrow columns, and the rows that must not be.

pyarrow's JSON reader parses the whole batch as one newline-delimited buffer
against an explicit schema (only the fields the plan reads; others are
skipped). It is strict where the per-event path is: a value of another type
than the schema's, a duplicate key, a bad escape or an invalid surrogate fail
the parse (polars' reader instead converts or keeps the first duplicate, so it
cannot tell such rows apart). A failed parse is retried on halves until the
failing rows are found; they run on the per-event executor.

The reader accepts a few things orjson (the per-event decoder) rejects, so
those rows are found first and left out of the parse (replaced by `{}`):
- not starting with `{` (not a record, leading whitespace), null, a line
  break (one value per line), `"$bytes"` (binary values decode differently);
- `NaN`/`Infinity`, numbers beyond a double (`1e999`), nesting deeper than
  orjson's limit: only possible in a row longer than 300 bytes or holding
  `NaN`, `Inf` or a digit followed by `e`/`E`; those rare rows are checked
  with orjson itself;
- invalid UTF-8 anywhere in the row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

# Rows at most this long cannot hide what orjson rejects behind an innocent look (see above).
SHORT_ROW = 300
# A failing range this small is given up (its rows fall back) rather than split further.
SMALLEST_SPLIT = 16
# Parses allowed per batch while looking for failing rows; the rest of a failing range falls back.
MAX_PARSES = 64
PLACEHOLDER = b"{}"
# Where pyarrow's parse errors name the row (of the buffer parsed, counting from 0).
_ROW = re.compile(r" in row (\d+)")
# A schema field no event has: the reader then still checks every row (an empty schema reads nothing).
_NO_FIELD = pa.field("\x00contraflow-columnar", pa.null())


@dataclass
class Parsed:
    """The batch's fields as an Arrow table (one row per value) and the rows to run per event."""

    table: pa.Table
    fallback: pa.BooleanArray


def parse_values(values: pa.Array, schema: pa.Schema, fallback: pa.BooleanArray) -> Parsed:
    """Parse `values` against `schema`; `fallback` marks rows already known to need the executor."""
    values = values.cast(pa.binary()) if values.type != pa.binary() else values
    fallback = pc.or_(fallback, _unparseable(values))
    replaced = pc.if_else(fallback, pa.scalar(PLACEHOLDER, pa.binary()), values)
    reader_schema = schema if len(schema) else pa.schema([_NO_FIELD])
    table, failed = _parse_ranges(replaced, reader_schema)
    if failed:
        fallback = pc.or_(fallback, _mask(len(values), failed))
    return Parsed(table, fallback)


def _unparseable(values: pa.Array) -> pa.BooleanArray:
    """Rows the reader would read differently from orjson (see the module docstring)."""
    data = pl.Series(values)
    bad = (
        data.is_null()
        | ~data.bin.starts_with(b"{")
        | data.bin.contains(b"\n")
        | data.bin.contains(b"\r")
        | data.bin.contains(b'"$bytes"')
    )
    text, invalid = _as_text(values)
    if invalid is not None:
        bad = bad | pl.Series(invalid)
    suspicious = (
        (data.bin.size() > SHORT_ROW)
        | data.bin.contains(b"NaN")
        | data.bin.contains(b"Inf")
        | pl.Series(text).str.contains("[0-9][eE]")
    ) & ~bad
    rows = suspicious.arg_true().to_list()
    if rows:
        rejected = [row for row in rows if not _orjson_accepts(values[row].as_py())]
        if rejected:
            bad = bad | pl.Series(_mask(len(values), [(row, row + 1) for row in rejected]))
    return bad.fill_null(True).to_arrow()


def _as_text(values: pa.Array) -> tuple[pa.Array, pa.BooleanArray | None]:
    """The values as UTF-8 text; rows that are not valid UTF-8 become `{}` and are marked."""
    try:
        return values.cast(pa.string()), None
    except pa.ArrowInvalid:
        invalid = [not _utf8(v) for v in values.to_pylist()]
        mask = pa.array(invalid, pa.bool_())
        return pc.if_else(mask, pa.scalar(PLACEHOLDER, pa.binary()), values).cast(pa.string()), mask


def _utf8(value: bytes | None) -> bool:
    if value is None:
        return True
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _orjson_accepts(value: bytes | None) -> bool:
    if value is None:
        return False
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return True


def _parse_ranges(values: pa.Array, schema: pa.Schema) -> tuple[pa.Table, list[tuple[int, int]]]:
    """Parse `values`, cutting failing rows out; returns the table and the row ranges that failed.

    A parse error names its row ("... in row N"): that row fails and the rows
    around it are parsed again. Errors without a row (a number too big for
    int64) split the range in halves instead."""
    pieces: dict[int, pa.Table] = {}
    failed: list[tuple[int, int]] = []
    pending = [(0, len(values))]
    parses = 0
    while pending:
        start, end = pending.pop()
        if parses >= MAX_PARSES:
            failed.append((start, end))
            pieces[start] = _nulls(schema, end - start)
            continue
        parses += 1
        table, bad_row = _parse(values.slice(start, end - start), schema)
        if table is not None:
            pieces[start] = table
        elif bad_row is not None:
            row = start + bad_row
            failed.append((row, row + 1))
            pieces[row] = _nulls(schema, 1)
            pending += [r for r in ((row + 1, end), (start, row)) if r[0] < r[1]]
        elif end - start <= SMALLEST_SPLIT:
            failed.append((start, end))
            pieces[start] = _nulls(schema, end - start)
        else:
            middle = (start + end) // 2
            pending += [(middle, end), (start, middle)]
    tables = [pieces[start] for start in sorted(pieces)]
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    return table.combine_chunks(), failed


def _parse(values: pa.Array, schema: pa.Schema) -> tuple[pa.Table | None, int | None]:
    """One newline-delimited parse of `values`: the table, or None and the failing row if known."""
    if not len(values):
        return _nulls(schema, 0), None
    lines = pc.binary_join_element_wise(values, pa.scalar(b"", pa.binary()), pa.scalar(b"\n", pa.binary()))
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset : lines.offset + len(lines) + 1]
    buffer = lines.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    try:
        table = pj.read_json(
            pa.BufferReader(buffer),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(len(buffer), 1 << 20)),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except pa.ArrowInvalid as error:
        found = _ROW.search(str(error))
        row = int(found.group(1)) if found else None
        return None, row if row is not None and row < len(values) else None
    return (table, None) if table.num_rows == len(values) else (None, None)


def _nulls(schema: pa.Schema, count: int) -> pa.Table:
    return pa.table([pa.nulls(count, f.type) for f in schema], schema=schema)


def _mask(count: int, ranges: list[tuple[int, int]]) -> pa.BooleanArray:
    flags = [False] * count
    for start, end in ranges:
        flags[start:end] = [True] * (end - start)
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
