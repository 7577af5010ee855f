"""Schemas as the registry holds them: parsed and checked per type, compared, and judged compatible.

A schema arrives as text with a `schemaType` (AVRO when absent). It is parsed
by the type's own library (fastavro, jsonschema) so a broken schema is refused
at registration (42201), never discovered by a consumer. Two registrations are
the same schema when their `identity` is equal: the parsed JSON with its keys
sorted (Avro, JSON Schema), the text without surrounding blanks (Protobuf).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import fastavro
import jsonschema
import orjson

from contraflow.spu.registry.avro_compatibility import read_problems
from contraflow.spu.registry.errors import INVALID_SCHEMA, RegistryError

TYPES = ("AVRO", "JSON", "PROTOBUF")
LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DEFAULT_LEVEL = "BACKWARD"


@dataclass(frozen=True)
class Schema:
    """A registered schema's content: what `GET /schemas/ids/{id}` answers."""

    text: str
    type: str = "AVRO"
    references: tuple[Any, ...] = field(default=())

    @property
    def identity(self) -> str:
        if self.type == "PROTOBUF":
            return f"PROTOBUF:{self.text.strip()}"
        refs = orjson.dumps(list(self.references), option=orjson.OPT_SORT_KEYS).decode()
        return (
            f"{self.type}:{orjson.dumps(orjson.loads(self.text), option=orjson.OPT_SORT_KEYS).decode()}{refs}"
        )

    def fields(self) -> dict[str, Any]:
        """The schema's part of a response: `schemaType` only when not AVRO, as Confluent's registry."""
        out: dict[str, Any] = {"schema": self.text}
        if self.type != "AVRO":
            out["schemaType"] = self.type
        if self.references:
            out["references"] = list(self.references)
        return out


def read_schema(body: Any) -> Schema:
    """The schema of a registration or lookup body, checked by its type's parser (42201 if broken)."""
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise RegistryError(INVALID_SCHEMA, "the body needs a 'schema' string")
    kind = body.get("schemaType") or "AVRO"
    if kind not in TYPES:
        raise RegistryError(INVALID_SCHEMA, f"unknown schemaType {kind!r}; known: {', '.join(TYPES)}")
    references = body.get("references") or []
    if not isinstance(references, list):
        raise RegistryError(INVALID_SCHEMA, "'references' must be a list")
    text: str = body["schema"]
    if kind == "AVRO":
        avro_parse(text)
        text = orjson.dumps(orjson.loads(text)).decode()  # compact, key order kept
    elif kind == "JSON":
        json_schema_parse(text)
        text = orjson.dumps(orjson.loads(text)).decode()
    return Schema(text, kind, tuple(references))


def avro_parse(text: str) -> tuple[Any, dict[str, Any]]:
    """fastavro's parse of an Avro schema and its table of named types; 42201 when invalid."""
    names: dict[str, Any] = {}
    try:
        parsed = fastavro.parse_schema(orjson.loads(text), named_schemas=names)
    except orjson.JSONDecodeError as err:
        raise RegistryError(INVALID_SCHEMA, f"Invalid schema: not JSON: {err}") from None
    except Exception as err:  # fastavro raises several types (SchemaParseException, KeyError, ...)
        raise RegistryError(INVALID_SCHEMA, f"Invalid schema: {err}") from None
    return parsed, names


def json_schema_parse(text: str) -> dict[str, Any] | bool:
    """A JSON Schema checked against its draft's meta-schema; 42201 when invalid."""
    try:
        document = orjson.loads(text)
        jsonschema.validators.validator_for(document).check_schema(document)
    except orjson.JSONDecodeError as err:
        raise RegistryError(INVALID_SCHEMA, f"Invalid schema: not JSON: {err}") from None
    except jsonschema.SchemaError as err:
        raise RegistryError(INVALID_SCHEMA, f"Invalid schema: {err.message}") from None
    if not isinstance(document, dict | bool):
        raise RegistryError(INVALID_SCHEMA, "Invalid schema: a JSON Schema is an object or a boolean")
    return document


def reader_problems(reader: Schema, writer: Schema) -> list[str]:
    """Why data written with `writer` is not readable with `reader` (empty: it is).

    Avro follows the spec's resolution rules. JSON Schema and Protobuf are
    judged by a narrower rule: a schema reads its own data, and two different
    schemas of these types are compatible only under level NONE (see
    docs/registry.md)."""
    if reader.type != writer.type:
        return [f"the schema type changed from {writer.type} to {reader.type}"]
    if reader.type == "AVRO":
        return read_problems(*avro_parse(reader.text), *avro_parse(writer.text))
    if reader.identity == writer.identity:
        return []
    return [f"{reader.type} schemas are compatible only when equal (or under level NONE)"]


def compatibility_problems(level: str, new: Schema, older: list[Schema]) -> list[str]:
    """Why `new` may not follow `older` (oldest first) under `level` (empty: it may)."""
    if level == "NONE" or not older:
        return []
    against = older if level.endswith("_TRANSITIVE") else older[-1:]
    problems: list[str] = []
    for old in against:
        if level.startswith(("BACKWARD", "FULL")):
            problems += [f"BACKWARD: {p}" for p in reader_problems(new, old)]
        if level.startswith(("FORWARD", "FULL")):
            problems += [f"FORWARD: {p}" for p in reader_problems(old, new)]
    return problems
