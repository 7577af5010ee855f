"""`remove-empty`: drop zero-length frames, e.g. blank lines after `separate` (as in Tremor)."""

from __future__ import annotations

from contraflow.codecs.processors.processor import Preprocessor


class RemoveEmptyPreprocessor(Preprocessor):
    name = "remove-empty"

    def process(self, data: bytes) -> list[bytes]:
        return [data] if data else []
