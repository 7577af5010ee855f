"""The `csv` codec: one RFC 4180 line is one event, an array of strings.

As in Tremor, decoding reads the first record of the frame (split lines
upstream with the `separate` preprocessor) and never converts field types;
encoding turns an array into one line without a line terminator, writing
strings as they are and other values as their JSON text (`123`, `true`).
"""

from __future__ import annotations

import csv
import io
from typing import Any

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError
from contraflow.codecs.json_codec import json_dumps
from contraflow.codecs.string_codec import text, utf8


class CsvCodec(Codec):
    name = "csv"
    mime_types = ("text/csv",)

    def setup(self) -> None:
        self._out = io.StringIO()
        self._writer = csv.writer(self._out, lineterminator="\r\n")  # quotes fields holding \r or \n

    def decode(self, data: bytes) -> list[str]:
        try:
            return next(csv.reader(io.StringIO(text("csv", data), newline="")), [])
        except csv.Error as err:
            raise CodecError("csv", str(err)) from None

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, list | tuple):
            raise CodecError("csv", f"only arrays can be encoded as a CSV line, got {type(value).__name__}")
        out = self._out
        out.seek(0)
        out.truncate()
        self._writer.writerow([self._field(item) for item in value])
        return utf8("csv", out.getvalue()[:-2])

    @staticmethod
    def _field(item: Any) -> str:
        if isinstance(item, str):
            return item
        return str(json_dumps(item, "csv"), "utf-8")
