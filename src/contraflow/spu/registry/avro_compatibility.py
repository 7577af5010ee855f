"""Can a reader's Avro schema read what a writer's schema wrote? The Avro spec's resolution rules.

fastavro resolves a writer against a reader only while it reads data, so a
registration (no data yet) is checked here, over schemas fastavro has parsed:
every named type is then spelled with its full name, and a later use of it is
that name as a string, looked up in the schema's own table of named types.
The answer is the list of reasons it cannot (empty: it can).
"""

from __future__ import annotations

from typing import Any

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# A writer's type the reader may read as a wider one (the spec's "promotions").
PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}
NAMED = frozenset({"record", "error", "enum", "fixed"})


class _Resolver:
    """One reader/writer pair; `seen` breaks the recursion of recursive named types."""

    def __init__(self, reader_names: dict[str, Any], writer_names: dict[str, Any]) -> None:
        self.reader_names, self.writer_names = reader_names, writer_names
        self.seen: set[tuple[str, str]] = set()

    def expand(self, schema: Any, names: dict[str, Any]) -> Any:
        """A named type's definition for its name; any other schema as it is."""
        if isinstance(schema, str) and schema not in PRIMITIVES:
            return names.get(schema, schema)
        return schema

    def problems(self, reader: Any, writer: Any, path: str) -> list[str]:
        reader = self.expand(reader, self.reader_names)
        writer = self.expand(writer, self.writer_names)
        if isinstance(writer, list):  # every branch the writer may have used must be readable
            return [p for branch in writer for p in self.problems(reader, branch, path)]
        if isinstance(reader, list):  # some branch of the reader must read the writer's type
            if any(not self.problems(branch, writer, path) for branch in reader):
                return []
            return [f"{path}: the reader's union has no branch for the writer's {_type(writer)}"]
        reader_type, writer_type = _type(reader), _type(writer)
        if reader_type != writer_type:
            if reader_type in PROMOTIONS.get(writer_type, ()):
                return []
            return [f"{path}: the writer's {writer_type} cannot be read as {reader_type}"]
        if reader_type in NAMED:
            return self.named(reader, writer, path)
        if reader_type == "array":
            return self.problems(reader["items"], writer["items"], f"{path}[]")
        if reader_type == "map":
            return self.problems(reader["values"], writer["values"], f"{path}{{}}")
        return []

    def named(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
        if not _same_name(reader, writer):
            return [f"{path}: the writer's {writer['name']} is not the reader's {reader['name']}"]
        pair = (reader["name"], writer["name"])
        if pair in self.seen:
            return []
        self.seen.add(pair)
        kind = reader["type"]
        if kind == "fixed" and reader["size"] != writer["size"]:
            return [f"{path}: fixed size {writer['size']} cannot be read as {reader['size']}"]
        if kind == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                return [f"{path}: the reader's enum lacks the symbols {missing}"]
            return []
        if kind in ("record", "error"):
            return self.record(reader, writer, path)
        return []

    def record(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
        written = {field["name"]: field for field in writer["fields"]}
        found: list[str] = []
        for field in reader["fields"]:
            names = [field["name"], *field.get("aliases", ())]
            source = next((written[name] for name in names if name in written), None)
            where = f"{path}.{field['name']}"
            if source is not None:
                found.extend(self.problems(field["type"], source["type"], where))
            elif "default" not in field:
                found.append(f"{where}: a field the writer does not have, without a default")
        return found


def _type(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema["type"]) if not isinstance(schema["type"], dict | list) else "complex"
    return str(schema)


def _same_name(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    unqualified = writer["name"].rsplit(".", 1)[-1]
    aliases = reader.get("aliases", ())
    return (
        reader["name"].rsplit(".", 1)[-1] == unqualified
        or writer["name"] in aliases
        or unqualified in aliases
    )


def read_problems(
    reader: Any, reader_names: dict[str, Any], writer: Any, writer_names: dict[str, Any]
) -> list[str]:
    """Why data written with `writer` cannot be read with `reader` (empty: it can).
    Both are fastavro-parsed schemas with the tables of named types their parse filled."""
    return _Resolver(reader_names, writer_names).problems(reader, writer, "$")
