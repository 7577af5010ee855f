"""The registry's contents as a last-wins table of keyed records, and the questions asked of it.

Every change is one or more records of the internal topic; the table is what
applying them in log order gives, so every registry that reads the topic from
the start holds the same table. Keys are JSON objects, like the ones
Confluent's registry writes to its own `_schemas` topic:

- `{"keytype": "SCHEMA", "subject": s, "version": v}`: one version of a subject
  (its schema id, schema, and `deleted` for a soft delete); null removes it
  (a hard delete);
- `{"keytype": "CONFIG", "subject": s}` (`null` subject: the global level):
  `{"compatibilityLevel": ...}`; null removes the subject's own level;
- `{"keytype": "IDS"}`: `{"last": n}`, the highest schema id ever handed out,
  so an id outlives a hard delete of every version that used it and is never
  given to another schema.

A later record of the same key replaces the earlier one, so the topic can be
compacted to the last record per key without changing the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from contraflow.spu.registry.errors import INVALID_SCHEMA, RegistryError
from contraflow.spu.registry.schemas import DEFAULT_LEVEL, Imports, Schema

MAX_REFERENCE_DEPTH = 32


@dataclass(frozen=True)
class Version:
    """One registered version of a subject."""

    subject: str
    version: int
    id: int
    schema: Schema
    deleted: bool = False

    def record(self) -> dict[str, Any]:
        """The version as `GET /subjects/{s}/versions/{v}` answers it."""
        return {"subject": self.subject, "version": self.version, "id": self.id, **self.schema.fields()}

    def value(self) -> dict[str, Any]:
        """The version as its record in the topic stores it."""
        return {**self.record(), "deleted": self.deleted}


def schema_key(subject: str, version: int) -> bytes:
    return _key({"keytype": "SCHEMA", "subject": subject, "version": version})


def config_key(subject: str | None) -> bytes:
    return _key({"keytype": "CONFIG", "subject": subject})


IDS_KEY = b'{"keytype":"IDS"}'


def _key(fields: dict[str, Any]) -> bytes:
    return orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)


class RegistryTable:
    """Subjects, versions, ids and levels, rebuilt by `apply`ing the topic's records in order."""

    def __init__(self) -> None:
        self.versions: dict[str, dict[int, Version]] = {}
        self.levels: dict[str | None, str] = {}
        self.last_id = 0

    def apply(self, key: bytes, value: bytes | None) -> None:
        """One record of the topic; records with a key of another kind are ignored (newer writers)."""
        fields = orjson.loads(key)
        content = None if value is None else orjson.loads(value)
        if not isinstance(fields, dict) or not isinstance(content, dict | None):
            raise ValueError("a registry record's key and value are JSON objects")
        kind = fields.get("keytype")
        if kind == "SCHEMA":
            self._apply_version(fields["subject"], int(fields["version"]), content)
        elif kind == "CONFIG":
            subject = fields.get("subject")
            if content is None:
                self.levels.pop(subject, None)
            else:
                self.levels[subject] = content["compatibilityLevel"]
        elif kind == "IDS" and content is not None:
            self.last_id = max(self.last_id, int(content["last"]))

    def _apply_version(self, subject: str, number: int, content: dict[str, Any] | None) -> None:
        versions = self.versions.setdefault(subject, {})
        if content is None:
            versions.pop(number, None)
            if not versions:
                del self.versions[subject]
            return
        schema = Schema(
            content["schema"], content.get("schemaType", "AVRO"), tuple(content.get("references", ()))
        )
        versions[number] = Version(subject, number, int(content["id"]), schema, bool(content.get("deleted")))
        self.last_id = max(self.last_id, int(content["id"]))

    # -- questions -------------------------------------------------------------------------------

    def subjects(self, deleted: bool = False) -> list[str]:
        """Subjects with a live version (or any version, with `deleted`)."""
        return sorted(
            s for s, vs in self.versions.items() if deleted or any(not v.deleted for v in vs.values())
        )

    def subject_versions(self, subject: str, deleted: bool = False) -> list[Version]:
        """A subject's versions, oldest first."""
        versions = self.versions.get(subject, {})
        return [versions[n] for n in sorted(versions) if deleted or not versions[n].deleted]

    def by_id(self, schema_id: int) -> list[Version]:
        """Every version (live or soft-deleted) that carries the schema id."""
        return [v for vs in self.versions.values() for v in vs.values() if v.id == schema_id]

    def id_of(self, schema: Schema) -> int | None:
        """The id this schema already has under any subject (one schema, one id)."""
        identity = schema.identity
        for versions in self.versions.values():
            for version in versions.values():
                if version.schema.identity == identity:
                    return version.id
        return None

    def imports(self, schema: Schema) -> Imports:
        """What `schema` refers to, directly or not, the referred-to first; a reference to a
        version that is not there is 42201 (as Confluent's registry answers it)."""
        found: dict[str, str] = {}
        self._add_imports(schema, found, depth=0)
        return tuple(found.items())

    def _add_imports(self, schema: Schema, found: dict[str, str], depth: int) -> None:
        if depth > MAX_REFERENCE_DEPTH:
            raise RegistryError(INVALID_SCHEMA, "Invalid schema: references nest too deep (a cycle?)")
        for reference in schema.references:
            name, subject, number = reference["name"], reference["subject"], reference["version"]
            version = self.versions.get(subject, {}).get(number)
            if version is None:
                raise RegistryError(
                    INVALID_SCHEMA,
                    f"Invalid schema: reference {name} names {subject} version {number}, not found",
                )
            self._add_imports(version.schema, found, depth + 1)
            found.setdefault(name, version.schema.text)

    def referrers(self, subject: str, version: int) -> list[Version]:
        """The live versions whose references name this version: it may not be deleted under them."""
        return [
            v
            for vs in self.versions.values()
            for v in vs.values()
            if not v.deleted
            and any(r["subject"] == subject and r["version"] == version for r in v.schema.references)
        ]

    def level(self, subject: str | None) -> str:
        """The subject's own level, else the global one, else BACKWARD."""
        return self.levels.get(subject) or self.levels.get(None) or DEFAULT_LEVEL
