"""The `avro` codec: Avro records in Confluent's wire format, schemas from a schema registry.

fastavro does the encoding both ways. Values are plain: logical types are
read as their underlying type (a `timestamp-millis` stays an integer, a
`decimal` its bytes), so every value a pipeline sees is one JSON and the
channels can carry. `decode_many` decodes a run of records that share a
schema in one fastavro call: their bodies become one block of an Avro object
container, which fastavro's compiled reader walks without a Python step per
record in this module.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError
from contraflow.codecs.schema_registry import RegistryClient, RegistryOptions, frame_header, split_frame

if TYPE_CHECKING:
    from types import ModuleType


def _fastavro() -> ModuleType:
    """fastavro, imported on first use: building a codec to check a config needs none of it."""
    import fastavro

    return fastavro


CONTAINER_MAGIC = b"Obj\x01"


def _zigzag(n: int) -> bytes:
    """Avro's `long`: zigzag, then base-128 varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _plain(schema: Any) -> Any:
    """The schema without `logicalType`s, so fastavro reads and writes the underlying types."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_plain(item) for item in schema]
    return schema


class _Schema:
    """One registry schema, parsed once: what decoding and encoding need of it."""

    def __init__(self, text: str) -> None:
        plain = _plain(orjson.loads(text))
        self.parsed = _fastavro().parse_schema(plain)
        sync = os.urandom(16)
        meta = {b"avro.schema": orjson.dumps(plain), b"avro.codec": b"null"}
        entries = b"".join(_zigzag(len(k)) + k + _zigzag(len(v)) + v for k, v in meta.items())
        self.container_head = CONTAINER_MAGIC + _zigzag(len(meta)) + entries + b"\x00" + sync
        self.sync = sync

    def read_block(self, bodies: Sequence[bytes | memoryview]) -> list[Any]:
        """The records of `bodies`, concatenated into one container block, read in one call."""
        data = b"".join(bodies)
        block = _zigzag(len(bodies)) + _zigzag(len(data))
        container = b"".join((self.container_head, block, data, self.sync))
        return list(_fastavro().reader(io.BytesIO(container)))


class AvroCodec(Codec[RegistryOptions]):
    name = "avro"
    mime_types = ("application/vnd.confluent.avro", "avro/binary")

    def setup(self) -> None:
        self._registry = RegistryClient(self.name, self.options, "AVRO")
        self._schemas: dict[int, _Schema] = {}
        self._writer: tuple[bytes, _Schema] | None = None

    def _schema(self, schema_id: int) -> _Schema:
        schema = self._schemas.get(schema_id)
        if schema is None:
            schema = self._schemas[schema_id] = _Schema(self._registry.schema(schema_id))
        return schema

    def decode(self, data: bytes) -> Any:
        schema_id, body = split_frame(self.name, data)
        schema = self._schema(schema_id)
        try:
            return _fastavro().schemaless_reader(io.BytesIO(body), schema.parsed, None)
        except Exception as err:  # fastavro raises EOFError, ValueError, IndexError... on bad bytes
            raise CodecError(self.name, f"not a record of schema {schema_id}: {err!r}") from None

    def decode_many(self, frames: Sequence[bytes]) -> list[Any]:
        """Each frame's value, or the `CodecError` it raised, in order; a run of frames with one
        schema is decoded in one fastavro call (a bad frame in it falls back to one by one)."""
        out: list[Any] = []
        run: list[memoryview] = []
        run_id = -1
        for frame in frames:
            try:
                schema_id, body = split_frame(self.name, frame)
                if schema_id != run_id:
                    out.extend(self._decode_run(run_id, run))
                    self._schema(schema_id)
                    run, run_id = [], schema_id
                run.append(body)
            except CodecError as err:
                out.extend(self._decode_run(run_id, run))
                run, run_id = [], -1
                out.append(err)
        out.extend(self._decode_run(run_id, run))
        return out

    def _decode_run(self, schema_id: int, bodies: list[memoryview]) -> list[Any]:
        if not bodies:
            return []
        schema = self._schemas[schema_id]
        try:
            values = schema.read_block(bodies)
        except Exception:  # noqa: BLE001 - some body is bad: find which, one by one
            values = []
        if len(values) == len(bodies):
            return values
        return [self._decode_body(schema_id, body) for body in bodies]

    def _decode_body(self, schema_id: int, body: memoryview) -> Any:
        try:
            return self.decode(frame_header(schema_id) + body)
        except CodecError as err:
            return err

    def encode(self, value: Any) -> bytes:
        if self._writer is None:
            schema_id, text = self._registry.writer_schema()
            self._writer = (frame_header(schema_id), _Schema(text))
        header, schema = self._writer
        out = io.BytesIO()
        out.write(header)
        try:
            _fastavro().schemaless_writer(out, schema.parsed, value, strict_allow_default=True)
        except Exception as err:  # fastavro raises ValueError, TypeError, KeyError... on bad values
            raise CodecError(
                self.name, f"cannot encode {type(value).__name__} as the schema's record: {err!r}"
            ) from None
        return out.getvalue()
