"""The Confluent Schema Registry REST API (the subset docs/registry.md lists) as a FastAPI app.

Bodies are read as JSON whatever their content type (clients send
`application/vnd.schemaregistry.v1+json`), and every refusal is the registry's
own error body, `{"error_code": ..., "message": ...}`, which Confluent's
clients turn into their `SchemaRegistryError`. With a token, every request
must carry it: as a Bearer token, or as the password of HTTP Basic auth (the
form Confluent's clients send with `basic.auth.user.info`).
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from contraflow.security import tokens_match
from contraflow.spu.protocol import SpuError
from contraflow.spu.registry.errors import INVALID_SCHEMA, STORE_ERROR, UNAUTHORIZED, RegistryError
from contraflow.spu.registry.schemas import TYPES
from contraflow.spu.registry.service import RegistryService

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"

log = logging.getLogger(__name__)


class RegistryResponse(JSONResponse):
    media_type = MEDIA_TYPE

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def _flag(value: str | None) -> bool:
    return (value or "").lower() == "true"


async def _body(request: Request) -> Any:
    try:
        return orjson.loads(await request.body())
    except orjson.JSONDecodeError as err:
        raise RegistryError(INVALID_SCHEMA, f"the request body is not JSON: {err}") from None


def _authorized(request: Request, token: str) -> bool:
    given = request.headers.get("authorization", "")
    scheme, _, credentials = given.partition(" ")
    if scheme.lower() == "bearer":
        return tokens_match(credentials.strip(), token)
    if scheme.lower() == "basic":
        try:
            password = base64.b64decode(credentials.strip(), validate=True).decode().partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            return False
        return tokens_match(password, token)
    return False


def registry_app(service: RegistryService, token: str | None = None) -> FastAPI:
    """The REST API over `service`; with `token`, requests without it get 401."""
    app = FastAPI(
        title="contraflow schema registry", default_response_class=RegistryResponse, openapi_url=None
    )

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        if token is not None and not _authorized(request, token):
            body = RegistryError(UNAUTHORIZED, "Unauthorized: a valid token is required").body()
            return RegistryResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        response: Response = await call_next(request)
        return response

    @app.exception_handler(RegistryError)
    async def refused(_: Request, err: RegistryError) -> Response:
        return RegistryResponse(err.body(), status_code=err.status)

    @app.exception_handler(Exception)
    async def store_failed(_: Request, err: Exception) -> Response:
        """The log could not be read or written (the SPU unreachable, a timeout): 50001, as
        Confluent's registry answers when its store fails; anything else is logged as a bug."""
        if not isinstance(err, OSError | SpuError | TimeoutError):
            log.exception("the schema registry failed on a request")
        body = RegistryError(STORE_ERROR, f"Error in the backend data store: {err}").body()
        return RegistryResponse(body, status_code=500)

    @app.get("/")
    async def root() -> dict[str, Any]:
        return {}

    @app.get("/schemas/types")
    async def schema_types() -> list[str]:
        return list(TYPES)

    @app.get("/schemas/ids/{schema_id}")
    async def schema_by_id(schema_id: int, format: str | None = None) -> dict[str, Any]:  # noqa: A002
        return await service.serialized(await service.schema_by_id(schema_id), format)

    @app.get("/schemas/ids/{schema_id}/schema")
    async def raw_schema_by_id(schema_id: int) -> Response:
        return PlainTextResponse((await service.schema_by_id(schema_id)).schema.text, media_type=MEDIA_TYPE)

    @app.get("/schemas/ids/{schema_id}/versions")
    async def id_versions(schema_id: int) -> list[dict[str, Any]]:
        return await service.id_versions(schema_id)

    @app.get("/schemas/ids/{schema_id}/subjects")
    async def id_subjects(schema_id: int) -> list[str]:
        return sorted({entry["subject"] for entry in await service.id_versions(schema_id)})

    @app.get("/subjects")
    async def subjects(deleted: str | None = None) -> list[str]:
        await service.topic.catch_up()
        return service.table.subjects(_flag(deleted))

    @app.get("/subjects/{subject}/versions")
    async def versions(subject: str, deleted: str | None = None) -> list[int]:
        return [v.version for v in await service.versions(subject, _flag(deleted))]

    @app.get("/subjects/{subject}/versions/{version}")
    async def version(
        subject: str,
        version: str,
        deleted: str | None = None,
        format: str | None = None,  # noqa: A002
    ) -> dict[str, Any]:
        found = await service.version(subject, version, _flag(deleted))
        return {**found.record(), **await service.serialized(found, format)}

    @app.get("/subjects/{subject}/versions/{version}/schema")
    async def raw_version(subject: str, version: str) -> Response:
        return PlainTextResponse((await service.version(subject, version)).schema.text, media_type=MEDIA_TYPE)

    @app.post("/subjects/{subject}/versions")
    async def register(subject: str, request: Request) -> dict[str, Any]:
        return {"id": await service.register(subject, await _body(request))}

    @app.post("/subjects/{subject}")
    async def lookup(subject: str, request: Request, deleted: str | None = None) -> dict[str, Any]:
        return (await service.lookup(subject, await _body(request), _flag(deleted))).record()

    @app.delete("/subjects/{subject}")
    async def delete_subject(subject: str, permanent: str | None = None) -> list[int]:
        return await service.delete_subject(subject, _flag(permanent))

    @app.delete("/subjects/{subject}/versions/{version}")
    async def delete_version(subject: str, version: str, permanent: str | None = None) -> int:
        return await service.delete_version(subject, version, _flag(permanent))

    @app.post("/compatibility/subjects/{subject}/versions/{version}")
    async def check_version(
        subject: str, version: str, request: Request, verbose: str | None = None
    ) -> dict[str, Any]:
        return _verdict(await service.check(subject, version, await _body(request)), _flag(verbose))

    @app.post("/compatibility/subjects/{subject}/versions")
    async def check_subject(subject: str, request: Request, verbose: str | None = None) -> dict[str, Any]:
        return _verdict(await service.check(subject, None, await _body(request)), _flag(verbose))

    @app.get("/config")
    async def global_level() -> dict[str, Any]:
        return {"compatibilityLevel": await service.level(None, True)}

    @app.put("/config")
    async def set_global_level(request: Request) -> dict[str, Any]:
        return {"compatibility": await service.set_level(None, await _body(request))}

    @app.get("/config/{subject}")
    async def subject_level(subject: str, defaultToGlobal: str | None = None) -> dict[str, Any]:  # noqa: N803
        return {"compatibilityLevel": await service.level(subject, _flag(defaultToGlobal))}

    @app.put("/config/{subject}")
    async def set_subject_level(subject: str, request: Request) -> dict[str, Any]:
        return {"compatibility": await service.set_level(subject, await _body(request))}

    @app.delete("/config/{subject}")
    async def delete_subject_level(subject: str) -> dict[str, Any]:
        return {"compatibilityLevel": await service.delete_level(subject)}

    return app


def _verdict(problems: list[str], verbose: bool) -> dict[str, Any]:
    answer: dict[str, Any] = {"is_compatible": not problems}
    if verbose:
        answer["messages"] = problems
    return answer
