"""The `influx` codec: one line of InfluxDB's line protocol per frame (see `line_protocol`).

A blank or `#` comment line carries no event (`NO_EVENT`), as in Tremor; a
line without a timestamp takes the time it was decoded, Tremor's ingest time.
"""

from __future__ import annotations

import time
from typing import Any

from contraflow.codecs.codec import NO_EVENT, Codec
from contraflow.codecs.errors import CodecError
from contraflow.codecs.line_protocol import LineError, parse_line, write_line
from contraflow.codecs.string_codec import text, utf8


class InfluxCodec(Codec):
    name = "influx"
    mime_types = ("text/plain",)

    def decode(self, data: bytes) -> Any:
        try:
            record = parse_line(text("influx", data), time.time_ns())
        except LineError as err:
            raise CodecError("influx", str(err)) from None
        return NO_EVENT if record is None else record

    def encode(self, value: Any) -> bytes:
        try:
            return utf8("influx", write_line(value))
        except LineError as err:
            raise CodecError("influx", str(err)) from None
