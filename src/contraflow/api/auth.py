"""Bearer-token authentication of the REST API (`--token` / `$CONTRAFLOW_TOKEN`).

A pure ASGI middleware, so streamed responses (server-sent events) pass
through untouched; every path needs the token, the page and /openapi.json too.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from contraflow.api.errors import error_response
from contraflow.security import tokens_match

_PREFIX = b"bearer "


class BearerAuth:
    """Answer 401 to any HTTP request without `Authorization: Bearer <token>`."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or tokens_match(self._presented(scope), self.token):
            await self.app(scope, receive, send)
            return
        response = error_response(
            401,
            "missing or wrong token: send `Authorization: Bearer <token>` (the runtime's --token)",
            headers={"WWW-Authenticate": "Bearer"},
        )
        await response(scope, receive, send)

    @staticmethod
    def _presented(scope: Scope) -> bytes | None:
        for name, value in scope.get("headers", ()):
            if name == b"authorization" and value[: len(_PREFIX)].lower() == _PREFIX:
                return bytes(value[len(_PREFIX) :].strip())
        return None
