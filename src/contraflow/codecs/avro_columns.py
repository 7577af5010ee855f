"""Many Avro records of one schema read field by field across all of them (numpy), not record by record.

The frames of a batch lie joined in one buffer, each record with its own read
position. A field is read for every record at once: a varint a byte at a time
for the rows still in one, a double as a view of 8 gathered bytes, strings and
bytes as one Arrow column taken from their slices of the buffer. Values come
out of C loops (numpy's `tolist`, Arrow's `to_pylist`); the only Python that
runs per record is the comprehension, generated per record type, that puts a
record's values into its dict (a dict display: CPython's quickest way to make
dicts of known keys).

Only the plain case is read here. A varint of 10 bytes or more, a negative
length, a union branch or enum index out of range, text that is not UTF-8, a
read past the record's end or an end short of it: each marks its record
*irregular*, and the codec decodes those one by one with fastavro as before, so
each gets exactly the value or the error it always did. A schema with arrays,
maps or a recursive type has no `plan`: its records are all decoded one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

Rows = npt.NDArray[np.intp]

VARINT_BYTES = 9
"""The longest varint read in bulk (63 bits: every long below 2**62 in magnitude); longer is irregular."""
_PADDING = bytes(16)  # after the last record, so a gather of the next bytes never leaves the buffer


class Unsupported(Exception):
    """A schema with a type this module does not read in bulk (array, map, a recursive type)."""


class Run:
    """The joined frames of a batch and where each record's reading stands."""

    def __init__(self, frames: Sequence[bytes], skip: int = 0) -> None:
        """`frames` joined; each record's body starts `skip` bytes into its frame (after a header)."""
        lengths = np.fromiter(map(len, frames), np.int64, len(frames))
        self.ends = np.cumsum(lengths)
        self.starts = self.ends - lengths
        self.pos = np.minimum(self.starts + skip, self.ends)
        self.buffer = np.frombuffer(b"".join([*frames, _PADDING]), np.uint8)
        self.irregular = np.zeros(len(frames), np.bool_)

    def advance(self, rows: Rows, to: npt.NDArray[np.int64]) -> None:
        """Move `rows` to `to`; one that would pass its record's end is irregular and stops there."""
        ends = self.ends[rows]
        over = to > ends
        if over.any():
            self.irregular[rows[over]] = True
            to = np.minimum(to, ends)
        self.pos[rows] = to

    def gather(self, rows: Rows, width: int) -> npt.NDArray[np.uint8]:
        """The next `width` bytes of each row (whatever follows, for a row near its end), one row each."""
        return self.buffer[self.pos[rows, None] + np.arange(width)]

    def varints(self, rows: Rows) -> npt.NDArray[np.int64]:
        """The zig-zag varint at each row's position (0 for an irregular one), each row moved past it.

        A byte at a time for the rows whose varint goes on, so the usual one- or
        two-byte varint costs a gather or two over the rows (faster, measured,
        than one gather of VARINT_BYTES for all, even for 6-byte varints)."""
        at = self.pos[rows]
        byte = self.buffer[at]
        raw = (byte & 0x7F).astype(np.uint64)
        going = np.flatnonzero(byte >= 0x80)
        for step in range(1, VARINT_BYTES):
            if not len(going):
                break
            at[going] += 1
            byte = self.buffer[at[going]]
            raw[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * step)
            going = going[byte >= 0x80]
        self.irregular[rows[going]] = True  # still going after VARINT_BYTES
        self.advance(rows, at + 1)
        return (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)

    def slices(self, rows: Rows, starts: npt.NDArray[np.int64]) -> pa.LargeBinaryArray:
        """The bytes of each row from `starts` to its position, one copy in Arrow's C++.

        Rows are in buffer order, so the slices and the gaps between them tile the
        buffer: one binary column of slice, gap, slice, ... (offsets only, over the
        buffer as it is), of which `take` keeps every other value."""
        if not len(rows):
            return pa.array([], pa.large_binary())
        bounds = np.empty(2 * len(rows), np.int64)
        bounds[0::2] = starts
        bounds[1::2] = self.pos[rows]
        tiles = pa.Array.from_buffers(
            pa.large_binary(), len(bounds) - 1, [None, pa.py_buffer(bounds), pa.py_buffer(self.buffer)]
        )
        return tiles.take(pa.array(np.arange(0, len(bounds), 2)))

    def mark(self, rows: Rows, which: npt.NDArray[np.bool_]) -> None:
        if which.any():
            self.irregular[rows[which]] = True

    def read(self, reader: Reader, rows: Rows) -> tuple[list[Any], Rows]:
        """`reader`'s values for `rows` (whole records), and the positions in `rows` of the irregular."""
        values = reader.read(self, rows)
        self.mark(rows, self.pos[rows] != self.ends[rows])  # a record longer than what was read
        return values, np.flatnonzero(self.irregular[rows])


def objects(values: list[Any]) -> npt.NDArray[np.object_]:
    """`values` as a numpy object array, element for element (never read as nested sequences)."""
    return np.fromiter(values, dtype=object, count=len(values))


class Reader:
    """Reads one schema type for many rows of a run: their values, in row order."""

    def read(self, run: Run, rows: Rows) -> list[Any]:
        raise NotImplementedError


class NullReader(Reader):
    def read(self, run: Run, rows: Rows) -> list[Any]:
        return [None] * len(rows)


class LongReader(Reader):
    """`int` and `long` alike, as fastavro reads them (no range check for `int`)."""

    def read(self, run: Run, rows: Rows) -> list[Any]:
        return run.varints(rows).tolist()


class BooleanReader(Reader):
    def read(self, run: Run, rows: Rows) -> list[Any]:
        byte = run.buffer[run.pos[rows]]
        run.advance(rows, run.pos[rows] + 1)
        return (byte != 0).tolist()


class NumberReader(Reader):
    """`float` and `double`: little-endian IEEE bytes, viewed as numbers."""

    def __init__(self, dtype: str) -> None:
        self.dtype = np.dtype(dtype)

    def read(self, run: Run, rows: Rows) -> list[Any]:
        raw = run.gather(rows, self.dtype.itemsize)
        run.advance(rows, run.pos[rows] + self.dtype.itemsize)
        return raw.view(self.dtype).ravel().tolist()


class BytesReader(Reader):
    """`bytes`, `string` (`text`) and `fixed` (`size`): slices gathered into one Arrow column."""

    def __init__(self, text: bool, size: int | None = None) -> None:
        self.type = pa.large_string() if text else pa.large_binary()
        self.size = size

    def read(self, run: Run, rows: Rows) -> list[Any]:
        if self.size is None:
            lengths = run.varints(rows)
            run.mark(rows, lengths < 0)
        else:
            lengths = np.full(len(rows), self.size, np.int64)
        starts = run.pos[rows]
        run.advance(rows, starts + np.maximum(lengths, 0))
        column = run.slices(rows, starts).view(self.type)
        try:
            return column.to_pylist()
        except UnicodeDecodeError:  # text that is not UTF-8 (Arrow decodes as strictly as fastavro)
            return self._with_bad_text(run, rows, column)

    @staticmethod
    def _with_bad_text(run: Run, rows: Rows, column: pa.Array) -> list[Any]:
        """The rare column with text that is not UTF-8: those rows irregular, the others decoded."""
        raw = column.view(pa.large_binary()).to_pylist()
        values: list[Any] = []
        for index, blob in enumerate(raw):
            try:
                values.append(blob.decode())
            except UnicodeDecodeError:
                run.irregular[rows[index]] = True
                values.append(None)
        return values


class EnumReader(Reader):
    def __init__(self, symbols: Sequence[str]) -> None:
        self.symbols = objects(list(symbols))

    def read(self, run: Run, rows: Rows) -> list[Any]:
        index = run.varints(rows)
        outside = (index < 0) | (index >= len(self.symbols))
        run.mark(rows, outside)
        return self.symbols[np.where(outside, 0, index)].tolist()


class UnionReader(Reader):
    """A branch index, then that branch: each branch read for the rows that took it."""

    def __init__(self, branches: Sequence[Reader]) -> None:
        self.branches = list(branches)

    def read(self, run: Run, rows: Rows) -> list[Any]:
        index = run.varints(rows)
        outside = (index < 0) | (index >= len(self.branches))
        run.mark(rows, outside)  # read no further: the record goes the per-record way
        values = np.full(len(rows), None, dtype=object)
        for number, branch in enumerate(self.branches):
            took = index == number
            if isinstance(branch, NullReader) or not took.any():
                continue
            if took.all():
                return branch.read(run, rows)
            values[took] = objects(branch.read(run, rows[took]))
        return values.tolist()


class RecordReader(Reader):
    """Each field in order over all rows, then one dict per row."""

    def __init__(self, name: str, names: Sequence[str], fields: Sequence[Reader]) -> None:
        self.fields = list(fields)
        self.rows_of = _rows_of(name, names) if names else None

    def read(self, run: Run, rows: Rows) -> list[Any]:
        if self.rows_of is None:  # a record without fields
            return [{} for _ in range(len(rows))]
        return self.rows_of(*(field.read(run, rows) for field in self.fields))


def _rows_of(record: str, names: Sequence[str]) -> Callable[..., list[dict[str, Any]]]:
    """A function of a record's columns (one list per field) that gives one dict per row.

    Generated once per record type, as `dataclasses` generates its methods: a
    comprehension over the zipped columns with a dict display of the field
    names is the quickest way CPython has to build many dicts of the same keys
    (half the time of `map(dict, map(zip, ...))`, which walks pairs).
    """
    columns = ", ".join(f"column{number}" for number in range(len(names)))
    values = ", ".join(f"value{number}" for number in range(len(names)))
    display = ", ".join(f"{name!r}: value{number}" for number, name in enumerate(names))
    source = f"lambda {columns}: [{{{display}}} for {values}, in zip({columns})]"
    built: Callable[..., list[dict[str, Any]]] = eval(compile(source, f"<avro record {record}>", "eval"))
    return built


_PRIMITIVES: dict[str, Reader] = {
    "null": NullReader(),
    "boolean": BooleanReader(),
    "int": LongReader(),
    "long": LongReader(),
    "float": NumberReader("<f4"),
    "double": NumberReader("<f8"),
    "bytes": BytesReader(text=False),
    "string": BytesReader(text=True),
}


def plan(schema: Any, named: dict[str, Any]) -> Reader | None:
    """The bulk reader of a fastavro-parsed schema (`named`: its table of named types), or None
    when the schema has a type read only per record."""
    try:
        return _reader(schema, named, ())
    except Unsupported:
        return None


def _reader(schema: Any, named: dict[str, Any], enclosing: tuple[str, ...]) -> Reader:
    if isinstance(schema, list):
        return UnionReader([_reader(branch, named, enclosing) for branch in schema])
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in enclosing or schema not in named:
            raise Unsupported(schema)  # a type that contains itself
        return _reader(named[schema], named, enclosing)
    kind = schema["type"]
    if kind in ("record", "error"):
        inner = (*enclosing, schema["name"])
        fields = schema["fields"]
        readers = [_reader(f["type"], named, inner) for f in fields]
        return RecordReader(schema["name"], [f["name"] for f in fields], readers)
    if kind == "enum":
        return EnumReader(schema["symbols"])
    if kind == "fixed":
        return BytesReader(text=False, size=int(schema["size"]))
    if kind in ("array", "map"):
        raise Unsupported(kind)
    return _reader(kind, named, enclosing)
