"""Can a reader's JSON Schema read what a writer's schema allowed? Every writer's document must pass.

A reader reads a writer's data when every document the writer's schema allows
the reader's allows too. That is decided keyword by keyword, as Confluent's
registry does for JSON Schema, over the keywords that constrain documents in
ways that can be compared:

- `type` (the reader's types cover the writer's; `number` covers `integer`),
  `enum` and `const` (the reader's values cover the writer's);
- bounds: a reader's `minimum`, `minLength`, ... no stricter than the
  writer's, and present only if the writer has one; `pattern`, `format`,
  `multipleOf` and `uniqueItems` as the writer has them;
- objects, under their content model: `additionalProperties` false is a
  closed model, anything else open. A property the reader adds to an open
  model must accept what the writer's open model lets through (any value,
  unless `additionalProperties` is a schema); a property the writer has and
  the reader's closed model lacks is refused; a property the reader newly
  requires is refused;
- arrays: `items` as the element's schema.

Other keywords (`$ref`, `anyOf`, `allOf`, `if`, ...) must be equal in both,
or the change is refused as not provably compatible: never a wrong "yes".
"""

from __future__ import annotations

from typing import Any

_COMPARED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        *("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"),
        *("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"),
        *("pattern", "format", "multipleOf", "uniqueItems"),
    }
)
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated", "readOnly"}
    | {"writeOnly"}
)
_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_EXACT = ("pattern", "format", "multipleOf", "uniqueItems")


def read_problems(reader: Any, writer: Any) -> list[str]:
    """Why a document the writer's schema allows may fail the reader's (empty: none may)."""
    return _problems(reader, writer, "$")


def _anything(schema: Any) -> bool:
    return schema is True or schema == {} or (isinstance(schema, dict) and not set(schema) - _ANNOTATIONS)


def _problems(reader: Any, writer: Any, path: str) -> list[str]:
    if not isinstance(reader, dict | bool) or not isinstance(writer, dict | bool):  # `items` as a list
        return [] if reader == writer else [f"{path}: changed (compatibility not provable)"]
    if reader is True or _anything(reader) or writer is False:
        return []
    if reader is False:
        return [f"{path}: the reader allows nothing here"]
    if writer is True or _anything(writer):
        return [f"{path}: the writer allows any value here, the reader does not"]
    other = (set(reader) | set(writer)) - _COMPARED - _ANNOTATIONS
    unequal = sorted(key for key in other if reader.get(key) != writer.get(key))
    if unequal:
        return [f"{path}: {', '.join(unequal)} changed (compatibility not provable)"]
    return [
        *_type_problems(reader, writer, path),
        *_value_problems(reader, writer, path),
        *_bound_problems(reader, writer, path),
        *_object_problems(reader, writer, path),
        *_problems(reader.get("items", True), writer.get("items", True), f"{path}[]"),
    ]


def _types(schema: dict[str, Any]) -> set[str] | None:
    found = schema.get("type")
    if found is None:
        return None
    return {found} if isinstance(found, str) else set(found)


def _type_problems(reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
    read, written = _types(reader), _types(writer)
    if read is None:
        return []
    if written is None:
        return [f"{path}: the writer allows any type, the reader only {sorted(read)}"]
    if "number" in read:
        read = read | {"integer"}
    missing = written - read
    return [f"{path}: the reader does not allow {sorted(missing)}"] if missing else []


def _value_problems(reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
    """`enum`/`const`: every value the writer may write is one the reader allows."""
    allowed = reader.get("enum", [reader["const"]] if "const" in reader else None)
    if allowed is None:
        return []
    written = writer.get("enum", [writer["const"]] if "const" in writer else None)
    if written is None:
        return [f"{path}: the reader allows only {allowed}, the writer any value"]
    missing = [value for value in written if value not in allowed]
    return [f"{path}: the reader does not allow {missing}"] if missing else []


def _bound_problems(reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
    problems = []
    for key in (*_LOWER_BOUNDS, *_UPPER_BOUNDS, *_EXACT):
        if key not in reader:
            continue
        mine, theirs = reader[key], writer.get(key)
        looser = theirs is not None and (
            (key in _LOWER_BOUNDS and theirs >= mine)
            or (key in _UPPER_BOUNDS and theirs <= mine)
            or (key in _EXACT and theirs == mine)
        )
        if not looser:
            problems.append(f"{path}: the reader's {key} {mine!r} is stricter than the writer's {theirs!r}")
    return problems


def _object_problems(reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
    read_props: dict[str, Any] = reader.get("properties", {})
    written_props: dict[str, Any] = writer.get("properties", {})
    read_extra = reader.get("additionalProperties", True)
    written_extra = writer.get("additionalProperties", True)
    problems = [
        f"{path}: the reader requires {name!r}, which the writer does not"
        for name in reader.get("required", [])
        if name not in writer.get("required", [])
    ]
    for name, schema in read_props.items():
        # a property only the reader names comes from the writer's additional properties
        source = written_props.get(name, written_extra)
        problems += _problems(schema, source, f"{path}.{name}")
    for name, schema in written_props.items():
        if name not in read_props:
            problems += _problems(read_extra, schema, f"{path}.{name}")
    unnamed = _problems(read_extra, written_extra, f"{path}.*")
    return problems + unnamed
