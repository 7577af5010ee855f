"""What the registry's REST API does, without HTTP: the rules of subjects, versions, ids and levels.

Reads answer from the table in memory; a read that misses first catches up
with the topic (another registry may have written it). Writes take turns (one
lock), catch up, check, then append their records and apply them from the
log, so what a write answers is what the log holds.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from contraflow.spu.registry import errors, protobuf_schemas
from contraflow.spu.registry.errors import RegistryError
from contraflow.spu.registry.schemas import LEVELS, Schema, check_schema, compatibility_problems, read_schema
from contraflow.spu.registry.state import IDS_KEY, RegistryTable, Version, config_key, schema_key
from contraflow.spu.registry.topic import SchemasTopic

LATEST = "latest"


class RegistryService:
    def __init__(self, topic: SchemasTopic, table: RegistryTable) -> None:
        self.topic = topic
        self.table = table
        self._writing = asyncio.Lock()

    # -- schemas by id ---------------------------------------------------------------------------

    async def schema_by_id(self, schema_id: int) -> Version:
        found = self.table.by_id(schema_id) or await self._after_catch_up(lambda: self.table.by_id(schema_id))
        if not found:
            raise errors.schema_not_found(f"Schema {schema_id} not found")
        return found[0]

    async def id_versions(self, schema_id: int) -> list[dict[str, Any]]:
        await self.schema_by_id(schema_id)
        return [
            {"subject": v.subject, "version": v.version} for v in self.table.by_id(schema_id) if not v.deleted
        ]

    # -- subjects and versions -------------------------------------------------------------------

    async def versions(self, subject: str, deleted: bool = False) -> list[Version]:
        found = self.table.subject_versions(subject, deleted) or await self._after_catch_up(
            lambda: self.table.subject_versions(subject, deleted)
        )
        if not found:
            raise errors.subject_not_found(subject)
        return found

    async def version(self, subject: str, version: str, deleted: bool = False) -> Version:
        number = parse_version(version)
        versions = await self.versions(subject, deleted=True)
        live = [v for v in versions if deleted or not v.deleted]
        if number is None:
            if not live:
                raise errors.subject_not_found(subject)
            return live[-1]
        for candidate in live:
            if candidate.version == number:
                return candidate
        raise errors.version_not_found(subject, number)

    async def lookup(self, subject: str, body: Any, deleted: bool = False) -> Version:
        """The version of `subject` holding this schema (`POST /subjects/{subject}`)."""
        schema = read_schema(body)
        versions = await self.versions(subject, deleted)
        for candidate in reversed(versions):
            if candidate.schema.identity == schema.identity:
                return candidate
        raise errors.schema_not_found()

    async def register(self, subject: str, body: Any) -> int:
        """The schema's id, registering it as the subject's next version unless it already is one."""
        schema = read_schema(body)
        async with self._writing:
            await self.topic.catch_up()
            live = self.table.subject_versions(subject)
            for existing in live:
                if existing.schema.identity == schema.identity:
                    return existing.id
            await self._checked(schema)
            problems = await self._problems(self.table.level(subject), schema, [v.schema for v in live])
            if problems:
                raise RegistryError(
                    errors.INCOMPATIBLE_SCHEMA,
                    "Schema being registered is incompatible with an earlier schema for subject "
                    f"'{subject}': " + "; ".join(problems),
                )
            schema_id = self.table.id_of(schema) or self.table.last_id + 1
            every = self.table.subject_versions(subject, deleted=True)
            number = every[-1].version + 1 if every else 1
            version = Version(subject, number, schema_id, schema)
            records = [(schema_key(subject, number), orjson.dumps(version.value()))]
            if schema_id > self.table.last_id:
                records.append((IDS_KEY, orjson.dumps({"last": schema_id})))
            await self.topic.append(records)
            return schema_id

    async def check(self, subject: str, version: str | None, body: Any) -> list[str]:
        """Why the schema may not follow the subject's version (or, without one, the versions the
        level compares against); empty when it may (`POST /compatibility/...`)."""
        schema = read_schema(body)
        await self.topic.catch_up()
        await self._checked(schema)
        level = self.table.level(subject)
        if version is None:
            live = self.table.subject_versions(subject)
            return await self._problems(level, schema, [v.schema for v in live])
        against = await self.version(subject, version)
        return await self._problems(level.removesuffix("_TRANSITIVE"), schema, [against.schema])

    async def _checked(self, schema: Schema) -> None:
        """Parse the schema with what it refers to (42201 if invalid), off the event loop: protoc
        and the parsers are CPU work."""
        imports = self.table.imports(schema)
        await asyncio.to_thread(check_schema, schema, imports)

    async def _problems(self, level: str, new: Schema, older: list[Schema]) -> list[str]:
        """The compatibility verdict, worked out in a thread; the references are looked up here,
        on the loop, as the table changes only on the loop."""
        imports = {schema.identity: self.table.imports(schema) for schema in (new, *older)}
        return await asyncio.to_thread(
            compatibility_problems, level, new, older, lambda schema: imports[schema.identity]
        )

    async def serialized(self, version: Version, form: str | None) -> dict[str, Any]:
        """A version's schema fields, a Protobuf one as a serialized descriptor when `form` is
        `serialized` (Confluent's `?format=serialized`, what a codec without protoc reads)."""
        schema = version.schema
        if form != "serialized" or schema.type != "PROTOBUF":
            return schema.fields()
        imports = self.table.imports(schema)
        proto = await asyncio.to_thread(protobuf_schemas.descriptor, schema.text, imports)
        return schema.fields(protobuf_schemas.serialized(proto))

    async def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        async with self._writing:
            await self.topic.catch_up()
            every = self.table.subject_versions(subject, deleted=True)
            if not every:
                raise errors.subject_not_found(subject)
            live = [v for v in every if not v.deleted]
            self._unreferenced(every)
            if permanent:
                if live:
                    raise RegistryError(
                        errors.SUBJECT_NOT_SOFT_DELETED,
                        f"Subject '{subject}' was not deleted first before being permanently deleted",
                    )
                await self.topic.append([(schema_key(subject, v.version), None) for v in every])
                return [v.version for v in every]
            if not live:
                raise RegistryError(errors.SUBJECT_SOFT_DELETED, f"Subject '{subject}' was soft deleted.")
            await self.topic.append([_soft_deleted(v) for v in live])
            return [v.version for v in live]

    async def delete_version(self, subject: str, version: str, permanent: bool) -> int:
        async with self._writing:
            await self.topic.catch_up()
            target = await self.version(subject, version, deleted=permanent)
            self._unreferenced([target])
            if permanent:
                if not target.deleted:
                    raise RegistryError(
                        errors.VERSION_NOT_SOFT_DELETED,
                        f"Subject '{subject}' Version {target.version} was not deleted first "
                        "before being permanently deleted",
                    )
                await self.topic.append([(schema_key(subject, target.version), None)])
            else:
                await self.topic.append([_soft_deleted(target)])
            return target.version

    def _unreferenced(self, versions: list[Version]) -> None:
        """Refuse (42206) to delete a version another live schema refers to: its readers need it."""
        for version in versions:
            referrers = self.table.referrers(version.subject, version.version)
            if referrers:
                names = ", ".join(f"{r.subject} version {r.version}" for r in referrers)
                raise RegistryError(
                    errors.REFERENCE_EXISTS,
                    f"One or more references exist to the schema {{subject={version.subject}, "
                    f"version={version.version}}}: {names}",
                )

    # -- compatibility levels --------------------------------------------------------------------

    async def set_level(self, subject: str | None, body: Any) -> str:
        level = body.get("compatibility") if isinstance(body, dict) else None
        if level not in LEVELS:
            raise RegistryError(
                errors.INVALID_COMPATIBILITY_LEVEL,
                f"Invalid compatibility level {level!r}; valid: {', '.join(LEVELS)}",
            )
        async with self._writing:
            await self.topic.append([(config_key(subject), orjson.dumps({"compatibilityLevel": level}))])
        return str(level)

    async def level(self, subject: str | None, default_to_global: bool) -> str:
        await self.topic.catch_up()
        if subject is not None and subject not in self.table.levels and not default_to_global:
            raise RegistryError(
                errors.SUBJECT_LEVEL_CONFIG_NOT_FOUND,
                f"Subject '{subject}' does not have subject-level compatibility configured",
            )
        return self.table.level(subject)

    async def delete_level(self, subject: str) -> str:
        async with self._writing:
            await self.topic.catch_up()
            if subject not in self.table.levels:
                raise errors.subject_not_found(subject)
            level = self.table.levels[subject]
            await self.topic.append([(config_key(subject), None)])
            return level

    async def _after_catch_up(self, question: Any) -> Any:
        await self.topic.catch_up()
        return question()


def _soft_deleted(version: Version) -> tuple[bytes, bytes]:
    marked = Version(version.subject, version.version, version.id, version.schema, deleted=True)
    return schema_key(version.subject, version.version), orjson.dumps(marked.value())


def parse_version(version: str) -> int | None:
    """A version in a path: a positive number, `latest` or -1 (None for the latest); else 42202."""
    if version in (LATEST, "-1"):
        return None
    if version.isdigit() and 0 < int(version) < 2**31:
        return int(version)
    raise RegistryError(
        errors.INVALID_VERSION,
        f"The specified version '{version}' is not a valid version id. Allowed values are "
        'between [1, 2^31-1] and the string "latest"',
    )


__all__ = ["RegistryService", "Schema", "parse_version"]
