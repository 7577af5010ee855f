"""The `null` codec, as in Tremor: every frame decodes to null, every value encodes to no bytes."""

from __future__ import annotations

from typing import Any

from contraflow.codecs.codec import Codec


class NullCodec(Codec):
    name = "null"
    mime_types = ("application/octet-stream",)

    def decode(self, data: bytes) -> None:
        return None

    def encode(self, value: Any) -> bytes:
        return b""
