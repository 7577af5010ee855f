"""Reading request bodies ourselves, so every bad body is a 4xx with a clear message.

FastAPI's own JSON handling rejects `curl -d '{"status":"paused"}'` (curl
sends `application/x-www-form-urlencoded`), which is exactly how Tremor's
API is used from a shell. So the routes read the raw body (capped in size),
accept JSON under the media types shells send, and validate with pydantic.
"""

from __future__ import annotations

from email.message import Message
from typing import Any, TypeVar

import orjson
from fastapi import Request
from pydantic import BaseModel, ValidationError

from contraflow.api.errors import ApiError, describe_validation_error

# Limits: a status patch is a few bytes; Troy sources are small text files.
MAX_PATCH_BYTES = 64 * 1024
MAX_SOURCE_BYTES = 1024 * 1024

# Media types under which a JSON body is still accepted: shells and scripts send these by default.
TEXT_LIKE = frozenset({"text/plain", "application/x-www-form-urlencoded", "application/octet-stream"})

B = TypeVar("B", bound=BaseModel)


def media_type(request: Request) -> str:
    """The request's media type without parameters, lower-case; '' when absent."""
    header = request.headers.get("content-type")
    if not header:
        return ""
    message = Message()
    message["content-type"] = header
    return message.get_content_type().lower()


def is_json(media: str) -> bool:
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, or 413 as soon as it grows past `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def decode_text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"request body is not valid UTF-8 (byte {e.start})") from None


def parse_json(body: bytes) -> Any:
    """Decode a JSON document; 400 when empty or malformed."""
    if not body.strip():
        raise ApiError(400, "request body is empty")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise ApiError(400, f"invalid JSON: {e}") from None


def validate(model: type[B], data: Any) -> B:
    """`data` as `model`, or 400 listing every problem (field: message)."""
    if not isinstance(data, dict):
        raise ApiError(400, f"expected a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ApiError(400, describe_validation_error(list(e.errors()))) from None


async def structured_body(request: Request, model: type[B], limit: int = MAX_PATCH_BYTES) -> B:
    """A small JSON body validated as `model`; 415 for media types that cannot hold JSON."""
    media = media_type(request)
    if media and not (is_json(media) or media in TEXT_LIKE):
        raise ApiError(415, f"unsupported media type '{media}': send application/json")
    return validate(model, parse_json(await read_body(request, limit)))
