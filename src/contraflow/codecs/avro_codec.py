"""The `avro` codec: Avro records in Confluent's wire format, schemas from a schema registry.

fastavro does the encoding both ways. Values are plain: logical types are
read as their underlying type (a `timestamp-millis` stays an integer, a
`decimal` its bytes), so every value a pipeline sees is one JSON and the
channels can carry.

A batch of frames (`decode_batch`, what the runtime calls with a pull's
frames) is read field by field across all its records of one schema
(`avro_columns`), each record's end still checked; the records that reading
finds irregular, and all those of a schema it cannot read in bulk, are decoded
one call each, as `decode` does, so a batch gives exactly what `decode` would.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from contraflow.codecs.avro_columns import Reader, Run, objects, plan
from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError
from contraflow.codecs.schema_registry import (
    HEADER_SIZE,
    MAGIC,
    Imports,
    RegistryClient,
    RegistryOptions,
    frame_header,
    schema_id_of,
)

if TYPE_CHECKING:
    from types import ModuleType


def _fastavro() -> ModuleType:
    """fastavro, imported on first use: building a codec to check a config needs none of it."""
    import fastavro

    return fastavro


def _write_data() -> Callable[..., None]:
    """The compiled writer inside fastavro's `schemaless_writer`, which is only this call after
    parsing its schema again and making a stream, every record (a fifth of an encode's time; the
    pinned fastavro is the one tests compare its bytes with)."""
    from fastavro._write import write_data  # type: ignore[attr-defined]  # not in its stubs

    writer: Callable[..., None] = write_data
    return writer


_WRITE_OPTIONS = {"strict": False, "strict_allow_default": True, "disable_tuple_notation": False}
"""What `schemaless_writer(..., strict_allow_default=True)` passes: a missing field takes its default."""


def _plain(schema: Any) -> Any:
    """The schema without `logicalType`s, so fastavro reads and writes the underlying types."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_plain(item) for item in schema]
    return schema


BULK_MIN = 256
"""Frames of a batch below which the per-record calls are cheaper than a bulk read, whose
set-up (a few hundred numpy and Arrow calls) costs about what decoding 150-250 records does."""


def _parse(text: str, imports: Imports = ()) -> tuple[Any, dict[str, Any]]:
    """A registry schema as fastavro's parsed form, logical types left out, and its table of named
    types, which holds those of the schemas it refers to too (parsed first, into the same table)."""
    names: dict[str, Any] = {}
    for _, imported in imports:
        _fastavro().parse_schema(_plain(orjson.loads(imported)), named_schemas=names)
    return _fastavro().parse_schema(_plain(orjson.loads(text)), named_schemas=names), names


class AvroCodec(Codec[RegistryOptions]):
    name = "avro"
    mime_types = ("application/vnd.confluent.avro", "avro/binary")

    def setup(self) -> None:
        self._registry = RegistryClient(self.name, self.options, "AVRO")
        self._schemas: dict[int, tuple[Any, Reader | None]] = {}  # id -> (parsed schema, bulk reader)
        self._read: Any = None  # fastavro's schemaless_reader, once a schema is known
        self._writer: tuple[bytes, Any, dict[str, Any], Callable[..., None]] | None = None
        # (frame header, parsed schema, its named types, fastavro's writer)

    def _schema(self, schema_id: int) -> tuple[Any, Reader | None]:
        """The parsed schema of `schema_id` and its bulk reader (None: read per record only),
        asked of the registry on first use."""
        found = self._schemas.get(schema_id)
        if found is None:
            self._read = _fastavro().schemaless_reader
            schema, names = _parse(*self._registry.resolved(schema_id))
            found = self._schemas[schema_id] = (schema, plan(schema, names))
        return found

    def decode(self, data: bytes) -> Any:
        schema_id = schema_id_of(self.name, data)
        schema = self._schema(schema_id)[0]
        stream = io.BytesIO(data)
        stream.seek(HEADER_SIZE)
        try:
            value = self._read(stream, schema, None)
        except Exception as err:  # fastavro raises EOFError, ValueError, IndexError... on bad bytes
            raise CodecError(self.name, f"not a record of schema {schema_id}: {err!r}") from None
        if stream.tell() != len(data):
            raise CodecError(
                self.name, f"{len(data) - stream.tell()} bytes after the record of schema {schema_id}"
            )
        return value

    def decode_batch(self, frames: Sequence[bytes]) -> list[Any]:
        """The records of each schema id read in bulk; the rest (bad headers, schemas without a
        bulk reader, irregular records) one by one. A schema the registry does not give is the
        same error for every frame of its id, asked once."""
        if len(frames) < BULK_MIN:
            return super().decode_batch(frames)
        run = Run(frames, HEADER_SIZE)
        framed = (run.ends - run.starts >= HEADER_SIZE) & (run.buffer[run.starts] == MAGIC)
        groups = self._by_schema(run, np.flatnonzero(framed))
        if len(groups) == 1 and len(groups[0][1]) == len(frames):  # the usual batch: one schema
            results, one_by_one = self._bulk(run, *groups[0])
        else:
            results, one_by_one = self._mixed(run, groups, np.flatnonzero(~framed))
        for row in one_by_one.tolist():
            results[row] = self.decoded_or_error(frames[row])
        return results

    def _mixed(
        self, run: Run, groups: list[tuple[int, np.ndarray]], unframed: np.ndarray
    ) -> tuple[list[Any], np.ndarray]:
        """Each schema's rows read on their own, their values put back in place; and the rows
        left for `decode`, the unframed ones among them (each gets its own error)."""
        results = np.full(len(run.ends), None, dtype=object)
        one_by_one = [unframed]
        for schema_id, rows in groups:
            values, left = self._bulk(run, schema_id, rows)
            results[rows] = objects(values)
            one_by_one.append(rows[left])
        return results.tolist(), np.concatenate(one_by_one)

    def _bulk(self, run: Run, schema_id: int, rows: np.ndarray) -> tuple[list[Any], np.ndarray]:
        """The values of `rows`, all of schema `schema_id`, and the positions among them of those
        left for `decode`. A schema the registry does not give is the same error for every one."""
        try:
            reader = self._schema(schema_id)[1]
        except CodecError as err:
            return [err] * len(rows), np.zeros(0, np.intp)
        if reader is None:
            return [None] * len(rows), np.arange(len(rows))
        return run.read(reader, rows)

    @staticmethod
    def _by_schema(run: Run, rows: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """`rows` of `run` grouped by schema id (the big-endian 4 bytes after the magic byte)."""
        header = run.buffer[run.starts[rows, None] + np.arange(1, HEADER_SIZE)]
        ids = header.astype(np.int64) @ np.array([1 << 24, 1 << 16, 1 << 8, 1], np.int64)
        unique, group = np.unique(ids, return_inverse=True)
        return [(int(schema_id), rows[group == number]) for number, schema_id in enumerate(unique)]

    def encode(self, value: Any) -> bytes:
        if self._writer is None:
            schema_id = self._registry.writer_schema()
            schema, names = _parse(*self._registry.resolved(schema_id))
            self._writer = (frame_header(schema_id), schema, names, _write_data())
        header, schema, names, write = self._writer
        out = bytearray(header)
        try:
            write(out, value, schema, names, "", _WRITE_OPTIONS)
        except Exception as err:  # fastavro raises ValueError, TypeError, KeyError... on bad values
            raise CodecError(
                self.name, f"cannot encode {type(value).__name__} as the schema's record: {err!r}"
            ) from None
        return bytes(out)
