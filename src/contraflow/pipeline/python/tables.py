"""Channel values to a `pyarrow.Table` and a result table back to channel values, column by column.

`python::batch` promises that contraflow's own code around the user's function does no per-event
Python: the values' bytes are joined and parsed by pyarrow's JSON reader (one column per top-level
field, types inferred per batch, a missing field null), and the result is written back with
polars' JSON writer one column at a time, each row's fields joined with nulls left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

if TYPE_CHECKING:
    import polars as pl

_NEWLINE = pa.scalar(b"\n", pa.binary())


def record_rows(values: pa.Array) -> pa.Array:
    """Which channel values are JSON records (a value that is not one goes to `err`)."""
    text = pc.utf8_ltrim_whitespace(values.cast(pa.string()))
    return pc.starts_with(text, "{").fill_null(False)


def records_table(values: pa.Array) -> pa.Table:
    """The records in `values` (binary JSON, each a record) as one table, a column per field.

    Raises pyarrow's ArrowInvalid when the batch does not parse into one table (a field that is a
    number in one event and a string in another)."""
    if not len(values):
        return pa.table({})
    # Line breaks are whitespace between JSON tokens (inside strings they are escaped), so
    # replacing them keeps every value on its line for the reader.
    flat = pc.replace_substring(values, b"\n", b" ")
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(flat)], pa.int32()), flat), _NEWLINE)
    buffer = joined[0].as_buffer()
    options = pa_json.ReadOptions(block_size=max(1 << 20, buffer.size + 1), use_threads=False)
    return pa_json.read_json(pa.BufferReader(buffer), read_options=options)


def result_table(result: Any) -> pa.Table:
    """What the user's function returned, as a pyarrow Table (a polars DataFrame is converted)."""
    if isinstance(result, pa.Table):
        return result
    if isinstance(result, pa.RecordBatch):
        return pa.Table.from_batches([result])
    to_arrow = getattr(result, "to_arrow", None)  # a polars DataFrame (polars is imported lazily)
    if to_arrow is not None and type(result).__module__.startswith("polars"):
        return to_arrow()
    raise TypeError(
        f"a python::batch function returns a pyarrow.Table or polars.DataFrame, not {type(result).__name__}"
    )


def table_values(table: pa.Table) -> pa.Array:
    """Each row of `table` as a JSON record (binary): column names as keys, nulls left out."""
    rows = table.num_rows
    if not table.num_columns:
        return pa.array([b"{}"] * rows, pa.binary())
    import polars

    frame = polars.from_arrow(table)
    assert isinstance(frame, polars.DataFrame)
    if not any(column.null_count for column in table.columns):  # nothing to leave out: one write
        return _lines(frame.write_ndjson(), rows).cast(pa.binary())
    fields = []
    for name in table.column_names:
        fields.append(_field_texts(frame, name, table.column(name)))
    body = pc.binary_join_element_wise(*fields, ",", null_handling="skip")
    return pc.binary_join_element_wise("{", body, "}", "").cast(pa.binary())


def _field_texts(frame: pl.DataFrame, name: str, column: pa.ChunkedArray) -> pa.Array:
    """`"name":value` per row (null where the value is null), the value as polars writes JSON."""
    texts = _lines(frame.select(name).write_ndjson(), frame.height)
    # Each line is {"name":value}: keep `"name":value`.
    field = pc.utf8_slice_codeunits(texts, 1, -1).cast(pa.string())
    return pc.if_else(pc.is_null(column.combine_chunks()), pa.scalar(None, pa.string()), field)


def _lines(text: str, count: int) -> pa.Array:
    """The `count` lines of newline-delimited `text` (it ends with a line break: one empty part)."""
    return pc.list_flatten(pc.split_pattern(pa.array([text], pa.large_string()), "\n"))[:count]
