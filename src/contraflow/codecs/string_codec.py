"""The `string` codec: a frame is UTF-8 text; invalid UTF-8 is a decode error.

Encoding follows Tremor: a string is written as its UTF-8 bytes, any other
value as its JSON text (so a record sent through `string` still arrives readable).
"""

from __future__ import annotations

from typing import Any

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError
from contraflow.codecs.json_codec import json_dumps


class StringCodec(Codec):
    name = "string"
    mime_types = ("text/plain", "text/html")

    def decode(self, data: bytes) -> str:
        return text("string", data)

    def encode(self, value: Any) -> bytes:
        if isinstance(value, str):
            return utf8("string", value)
        return json_dumps(value, "string")


def text(codec: str, data: bytes) -> str:
    """`data` as UTF-8 text; invalid UTF-8 is a `CodecError` naming the byte where it starts."""
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError as err:
        raise CodecError(codec, f"invalid UTF-8 at byte {err.start}: {err.reason}") from None


def utf8(codec: str, text: str) -> bytes:
    """`text` as UTF-8; lone surrogates (which UTF-8 cannot carry) are a `CodecError`."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise CodecError(codec, f"cannot encode string as UTF-8 at index {err.start}: {err.reason}") from None
