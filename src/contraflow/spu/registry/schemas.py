"""Schemas as the registry holds them: parsed and checked per type, compared, and judged compatible.

A schema arrives as text with a `schemaType` (AVRO when absent) and the
`references` it needs (other subjects' versions: Avro named types, Protobuf
imports). It is parsed by the type's own library (fastavro, jsonschema, protoc)
with what it refers to, so a broken schema is refused at registration (42201),
never discovered by a consumer. Two registrations are the same schema when
their `identity` is equal: the parsed JSON with its keys sorted (Avro, JSON
Schema) or the text without surrounding blanks (Protobuf), and the references.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import fastavro
import jsonschema
import orjson

from contraflow.spu.registry import protobuf_schemas
from contraflow.spu.registry.avro_compatibility import read_problems as avro_read_problems
from contraflow.spu.registry.errors import INVALID_SCHEMA, RegistryError
from contraflow.spu.registry.json_schema_compatibility import read_problems as json_read_problems
from contraflow.spu.registry.protobuf_compatibility import read_problems as protobuf_read_problems

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
        refs = orjson.dumps(list(self.references), option=orjson.OPT_SORT_KEYS).decode()
        if self.type == "PROTOBUF":
            return f"PROTOBUF:{self.text.strip()}{refs}"
        return (
            f"{self.type}:{orjson.dumps(orjson.loads(self.text), option=orjson.OPT_SORT_KEYS).decode()}{refs}"
        )

    def fields(self, text: str | None = None) -> dict[str, Any]:
        """The schema's part of a response: `schemaType` only when not AVRO, as Confluent's registry
        (`text`: the schema in another format than it was registered in)."""
        out: dict[str, Any] = {"schema": self.text if text is None else text}
        if self.type != "AVRO":
            out["schemaType"] = self.type
        if self.references:
            out["references"] = list(self.references)
        return out


Imports = tuple[tuple[str, str], ...]
"""(reference name, schema text) of every schema a schema refers to, directly or not, each after
the ones it refers to itself: the order a parser must read them in."""

ImportsOf = Callable[[Schema], Imports]


def read_schema(body: Any) -> Schema:
    """The schema of a registration or lookup body: its shape checked, JSON texts made compact
    (42201 when not JSON); parsing waits for its references (`check_schema`)."""
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise RegistryError(INVALID_SCHEMA, "the body needs a 'schema' string")
    kind = body.get("schemaType") or "AVRO"
    if kind not in TYPES:
        raise RegistryError(INVALID_SCHEMA, f"unknown schemaType {kind!r}; known: {', '.join(TYPES)}")
    references = body.get("references") or []
    if not isinstance(references, list) or not all(_is_reference(r) for r in references):
        raise RegistryError(INVALID_SCHEMA, '\'references\' must be a list of {"name", "subject", "version"}')
    text: str = body["schema"]
    if kind in ("AVRO", "JSON"):
        try:
            text = orjson.dumps(orjson.loads(text)).decode()  # compact, key order kept
        except orjson.JSONDecodeError as err:
            raise RegistryError(INVALID_SCHEMA, f"Invalid schema: not JSON: {err}") from None
    return Schema(text, kind, tuple(references))


def _is_reference(reference: Any) -> bool:
    return (
        isinstance(reference, dict)
        and isinstance(reference.get("name"), str)
        and isinstance(reference.get("subject"), str)
        and isinstance(reference.get("version"), int)
    )


def check_schema(schema: Schema, imports: Imports) -> None:
    """Parse the schema by its type's parser, with what it refers to; 42201 when it is invalid."""
    if schema.type == "AVRO":
        avro_parse(schema.text, imports)
    elif schema.type == "JSON":
        json_schema_parse(schema.text)
    else:
        protobuf_schemas.descriptor(schema.text, imports)


def avro_parse(text: str, imports: Imports = ()) -> tuple[Any, dict[str, Any]]:
    """fastavro's parse of an Avro schema and its table of named types (the named types of the
    schemas it refers to first); 42201 when invalid."""
    names: dict[str, Any] = {}
    try:
        for _, imported in imports:
            fastavro.parse_schema(orjson.loads(imported), named_schemas=names)
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


def reader_problems(reader: Schema, writer: Schema, imports_of: ImportsOf) -> list[str]:
    """Why data written with `writer` is not readable with `reader` (empty: it is): Avro by the
    spec's resolution rules, Protobuf by field numbers and wire types, JSON Schema by whether
    every document the writer allows the reader allows too (docs/registry.md)."""
    if reader.type != writer.type:
        return [f"the schema type changed from {writer.type} to {reader.type}"]
    if reader.identity == writer.identity:
        return []
    if reader.type == "AVRO":
        return avro_read_problems(
            *avro_parse(reader.text, imports_of(reader)), *avro_parse(writer.text, imports_of(writer))
        )
    if reader.type == "PROTOBUF":
        return protobuf_read_problems(
            protobuf_schemas.descriptor(reader.text, imports_of(reader)),
            protobuf_schemas.descriptor(writer.text, imports_of(writer)),
        )
    return json_read_problems(json_schema_parse(reader.text), json_schema_parse(writer.text))


def compatibility_problems(level: str, new: Schema, older: list[Schema], imports_of: ImportsOf) -> list[str]:
    """Why `new` may not follow `older` (oldest first) under `level` (empty: it may)."""
    if level == "NONE" or not older:
        return []
    against = older if level.endswith("_TRANSITIVE") else older[-1:]
    problems: list[str] = []
    for old in against:
        if level.startswith(("BACKWARD", "FULL")):
            problems += [f"BACKWARD: {p}" for p in reader_problems(new, old, imports_of)]
        if level.startswith(("FORWARD", "FULL")):
            problems += [f"FORWARD: {p}" for p in reader_problems(old, new, imports_of)]
    return problems
