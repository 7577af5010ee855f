"""`ingest-ns`: an 8-byte big-endian ingest timestamp (nanoseconds) in front of each frame, as in Tremor.

The postprocessor prepends the time the frame is written (Tremor prepends the
event's ingest time, which a contraflow postprocessor does not see); the
preprocessor removes the 8 bytes again. A frame shorter than 8 bytes is an error.
"""

from __future__ import annotations

import struct
import time

from contraflow.codecs.processors.processor import Postprocessor, Preprocessor

_STAMP = struct.Struct(">Q")


class IngestNsPreprocessor(Preprocessor):
    name = "ingest-ns"

    def process(self, data: bytes) -> list[bytes]:
        if len(data) < _STAMP.size:
            raise self.error(f"frame of {len(data)} bytes is shorter than its 8-byte timestamp")
        return [data[_STAMP.size :]]


class IngestNsPostprocessor(Postprocessor):
    name = "ingest-ns"

    def process(self, data: bytes) -> list[bytes]:
        return [_STAMP.pack(time.time_ns()) + data]
