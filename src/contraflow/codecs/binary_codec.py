"""The `binary` codec: a frame becomes a `bytes` value, untouched.

Encoding follows Tremor: `bytes` are written as they are, a string as its
UTF-8 bytes, and any other value as its JSON text.
"""

from __future__ import annotations

from typing import Any

from contraflow.codecs.codec import Codec
from contraflow.codecs.json_codec import json_dumps
from contraflow.codecs.string_codec import utf8


class BinaryCodec(Codec):
    name = "binary"
    mime_types = ("application/octet-stream",)

    def decode(self, data: bytes) -> bytes:
        return data if type(data) is bytes else bytes(data)

    def encode(self, value: Any) -> bytes:
        if isinstance(value, bytes):
            return value
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        if isinstance(value, str):
            return utf8("binary", value)
        return json_dumps(value, "binary")
