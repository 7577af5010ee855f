"""The `avro` codec: Avro records in Confluent's wire format, schemas from a schema registry.

fastavro does the encoding both ways. Values are plain: logical types are
read as their underlying type (a `timestamp-millis` stays an integer, a
`decimal` its bytes), so every value a pipeline sees is one JSON and the
channels can carry.

Records are decoded one call each. fastavro's compiled container reader would
take a whole run of records in one call, but it cannot tell where one record
ends: a record with a byte too many or too few shifts every record after it
into silently wrong values, and guarding against that costs more than the
call saves (benchmarks/codecs.py and docs/registry.md give the figures).
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import orjson

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError
from contraflow.codecs.schema_registry import (
    HEADER_SIZE,
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


def _plain(schema: Any) -> Any:
    """The schema without `logicalType`s, so fastavro reads and writes the underlying types."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_plain(item) for item in schema]
    return schema


def _parse(text: str, imports: Imports = ()) -> Any:
    """A registry schema as fastavro's parsed form, logical types left out, with the named types
    of the schemas it refers to (parsed first, into the same table of names)."""
    names: dict[str, Any] = {}
    for _, imported in imports:
        _fastavro().parse_schema(_plain(orjson.loads(imported)), named_schemas=names)
    return _fastavro().parse_schema(_plain(orjson.loads(text)), named_schemas=names)


class AvroCodec(Codec[RegistryOptions]):
    name = "avro"
    mime_types = ("application/vnd.confluent.avro", "avro/binary")

    def setup(self) -> None:
        self._registry = RegistryClient(self.name, self.options, "AVRO")
        self._schemas: dict[int, Any] = {}  # schema id -> parsed schema
        self._read: Any = None  # fastavro's schemaless_reader, once a schema is known
        self._writer: tuple[bytes, Any] | None = None  # (frame header, parsed schema)

    def _schema(self, schema_id: int) -> Any:
        """The parsed schema of `schema_id`, asked of the registry on first use."""
        self._read = _fastavro().schemaless_reader
        schema = self._schemas[schema_id] = _parse(*self._registry.resolved(schema_id))
        return schema

    def decode(self, data: bytes) -> Any:
        schema_id = schema_id_of(self.name, data)
        schema = self._schemas.get(schema_id) or self._schema(schema_id)
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

    def encode(self, value: Any) -> bytes:
        if self._writer is None:
            schema_id = self._registry.writer_schema()
            self._writer = (frame_header(schema_id), _parse(*self._registry.resolved(schema_id)))
        header, schema = self._writer
        out = io.BytesIO()
        out.write(header)
        try:
            _fastavro().schemaless_writer(out, schema, value, strict_allow_default=True)
        except Exception as err:  # fastavro raises ValueError, TypeError, KeyError... on bad values
            raise CodecError(
                self.name, f"cannot encode {type(value).__name__} as the schema's record: {err!r}"
            ) from None
        return out.getvalue()
