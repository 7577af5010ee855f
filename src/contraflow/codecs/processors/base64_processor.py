"""`base64`: each frame is standard, padded base64 (RFC 4648), decoded or encoded whole."""

from __future__ import annotations

import binascii

from contraflow.codecs.processors.processor import Postprocessor, Preprocessor


class Base64Preprocessor(Preprocessor):
    name = "base64"

    def process(self, data: bytes) -> list[bytes]:
        try:
            return [binascii.a2b_base64(data, strict_mode=True)]
        except binascii.Error as err:
            raise self.error(f"invalid base64: {err}") from None


class Base64Postprocessor(Postprocessor):
    name = "base64"

    def process(self, data: bytes) -> list[bytes]:
        return [binascii.b2a_base64(data, newline=False)]
