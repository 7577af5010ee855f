"""Every error the API returns is `{"code": N, "error": "..."}` with status N.

User mistakes map to 4xx (unknown ids 404, bad bodies 400, unsupported
media 415, wrong methods 405, clashing deployments 409); a deployment that
needs Spark when Spark did not start is 503; only a bug in the runtime or the
API itself produces a 500, and even that keeps the JSON shape.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from contraflow.api.facade import FlowExists, SparkUnavailable, UnknownConnector, UnknownFlow
from contraflow.api.models import CompileErrorDetail, ErrorBody
from contraflow.errors import UserError
from contraflow.lang.errors import LangError, LangErrors

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error reply raised from a route: status code and message."""

    def __init__(self, code: int, error: str) -> None:
        super().__init__(error)
        self.code = code
        self.error = error


def error_response(
    code: int, error: str, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body = ErrorBody(code=code, error=error, **extra).model_dump(exclude_none=True)
    return JSONResponse(body, status_code=code, headers=headers)


def describe_validation_error(errors: list[Any]) -> str:
    """One readable line per pydantic/FastAPI error: `where: what`."""
    lines = []
    for e in errors:
        loc = ".".join(str(part) for part in e.get("loc", ()) if part != "body") or "body"
        msg = e.get("msg", "invalid value")
        ctx = e.get("ctx") or {}
        if e.get("type") == "json_invalid" and "error" in ctx:
            msg = f"invalid JSON: {ctx['error']}"
        lines.append(f"{loc}: {msg}")
    return "; ".join(lines)


def _compile_details(exc: LangError | LangErrors) -> list[CompileErrorDetail]:
    errors = exc.errors if isinstance(exc, LangErrors) else [exc]
    return [
        CompileErrorDetail(
            file=e.position.file,
            line=e.position.line,
            column=e.position.column,
            message=e.message,
            hint=e.hint,
        )
        for e in errors
    ]


def _status_of(exc: UserError) -> int:
    if isinstance(exc, UnknownFlow | UnknownConnector):
        return 404
    if isinstance(exc, FlowExists):
        return 409
    if isinstance(exc, SparkUnavailable):
        return 503  # not the request's fault: the same deployment works once Spark runs
    return 400  # InvalidTransition, LangError(s), any other user mistake


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.code, exc.error)


async def _user_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, UserError)
    if isinstance(exc, LangError | LangErrors):
        return error_response(400, str(exc), errors=_compile_details(exc))
    return error_response(_status_of(exc), str(exc))


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(400, describe_validation_error(list(exc.errors())))


def allowed_methods(request: Request) -> str:
    """Every method of every route matching the path (Starlette names only the first route's)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if route.matches(request.scope)[0] != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["allow"] = allowed_methods(request)
    return error_response(exc.status_code, detail, headers=headers)


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    # One line here; Starlette re-raises after this reply, so the server logs the traceback.
    log.error("internal error in %s %s: %r", request.method, request.url.path, exc)
    return error_response(500, f"internal error: {type(exc).__name__}")


def install_error_handlers(app: FastAPI) -> None:
    """Route every exception class to its `{"code", "error"}` reply."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(UserError, _user_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)
