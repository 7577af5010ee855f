"""`influx||`: one line of the InfluxDB line protocol, read by the `influx` codec's parser.

`weather,location=us-midwest temperature=82,ok=t 1465839830100400200` yields
`{"measurement": "weather", "tags": {"location": "us-midwest"},
"fields": {"temperature": 82.0, "ok": true}, "timestamp": 1465839830100400200}`.
Field values are floats unless written `12i` (integer), `"..."` (string) or
t/true/f/false (bool). Without a timestamp the event's ingest time is used, as in Tremor. A text
that is not a line (a comment or blank line included) does not match.
"""

from __future__ import annotations

from typing import Any

from contraflow.codecs.line_protocol import LineError, parse_line
from contraflow.lang.script.extractors.text import of_text
from contraflow.lang.script.stdlib.system_ import ingest_ns
from contraflow.lang.script.values import MISSING


def build(text: str) -> Any:
    def extract(value: str) -> Any:
        try:
            record = parse_line(value, ingest_ns())
        except LineError:
            return MISSING
        return MISSING if record is None else record

    return of_text(extract)
