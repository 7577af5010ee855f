"""The `json_schema` codec: JSON documents in Confluent's wire format, checked against their JSON Schema.

Decoding validates each document against the schema its id names, and
encoding against the subject's schema, so a pipeline neither reads nor writes
a document its schema forbids: such a document is a `CodecError` (an `err`
event). jsonschema checks; orjson parses and writes.
"""

from __future__ import annotations

from typing import Any

import orjson

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError
from contraflow.codecs.schema_registry import (
    HEADER_SIZE,
    RegistryClient,
    RegistryOptions,
    frame_header,
    schema_id_of,
)


class JsonSchemaCodec(Codec[RegistryOptions]):
    name = "json_schema"
    mime_types = ("application/vnd.confluent.jsonschema",)

    def setup(self) -> None:
        self._registry = RegistryClient(self.name, self.options, "JSON")
        self._validators: dict[int, Any] = {}
        self._writer: tuple[bytes, Any] | None = None

    def _validator(self, text: str) -> Any:
        import jsonschema  # imported on first use: a slow import that most commands never need

        document = orjson.loads(text)
        return jsonschema.validators.validator_for(document)(document)

    def _check(self, validator: Any, value: Any, what: str) -> None:
        import jsonschema

        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is not None:
            where = "/".join(map(str, error.absolute_path)) or "the document"
            raise CodecError(self.name, f"{what} breaks its schema at {where}: {error.message}")

    def decode(self, data: bytes) -> Any:
        schema_id = schema_id_of(self.name, data)
        validator = self._validators.get(schema_id)
        if validator is None:
            validator = self._validators[schema_id] = self._validator(self._registry.schema(schema_id))
        try:
            value = orjson.loads(memoryview(data)[HEADER_SIZE:])
        except orjson.JSONDecodeError as err:
            raise CodecError(self.name, f"not JSON: {err}") from None
        self._check(validator, value, "the document")
        return value

    def encode(self, value: Any) -> bytes:
        if self._writer is None:
            schema_id = self._registry.writer_schema()
            self._writer = (frame_header(schema_id), self._validator(self._registry.schema(schema_id)))
        header, validator = self._writer
        self._check(validator, value, "the value")
        try:
            return header + orjson.dumps(value)
        except TypeError as err:
            raise CodecError(self.name, f"cannot write as JSON: {err}") from None
