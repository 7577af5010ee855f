"""`influx||`: one line of the InfluxDB line protocol.

`weather,location=us-midwest temperature=82,ok=t 1465839830100400200` yields
`{"measurement": "weather", "tags": {"location": "us-midwest"},
"fields": {"temperature": 82.0, "ok": true}, "timestamp": 1465839830100400200}`.
Field values are floats unless written `12i` (integer), `"..."` (string) or
t/true/f/false (bool). Without a timestamp the current time is used.
"""

from __future__ import annotations

from typing import Any

from contraflow.lang.script.extractors.text import of_text
from contraflow.lang.script.stdlib.system_ import ingest_ns
from contraflow.lang.script.values import MISSING

_TRUE = {"t", "T", "true", "True", "TRUE"}
_FALSE = {"f", "F", "false", "False", "FALSE"}


class _Invalid(Exception):
    """The text is not a line of the protocol."""


def _split(text: str, seps: str, quotes: bool = False) -> tuple[str, str, str]:
    """(text before the first unescaped separator, the separator, the rest); '' separator at the end."""
    i, quoted = 0, False
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if quotes and ch == '"':
            quoted = not quoted
        elif not quoted and ch in seps:
            return text[:i], ch, text[i + 1 :]
        i += 1
    if quoted:
        raise _Invalid
    return text, "", ""


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in ' ,="\\':
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _pairs(text: str, quotes: bool) -> list[tuple[str, str]]:
    pairs = []
    while text:
        item, _, text = _split(text, ",", quotes)
        key, sep, value = _split(item, "=")
        if not sep or not key or not value:
            raise _Invalid
        pairs.append((_unescape(key), value))
    return pairs


def _field_value(raw: str) -> Any:
    if raw.startswith('"'):
        if len(raw) < 2 or not raw.endswith('"'):
            raise _Invalid
        return _unescape(raw[1:-1])
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    try:
        if raw.endswith(("i", "u")):
            return int(raw[:-1])
        return float(raw)
    except ValueError:
        raise _Invalid from None


def parse_line(line: str) -> dict[str, Any]:
    """The record for one line; raises _Invalid when it is not the line protocol."""
    head, sep, rest = _split(line.strip(), " ")
    if not sep or not head or head.startswith("#"):
        raise _Invalid
    measurement, _, tags = _split(head, ",")
    fields_text, _, stamp = _split(rest.lstrip(" "), " ", quotes=True)
    fields = {k: _field_value(v) for k, v in _pairs(fields_text, quotes=True)}
    if not fields:
        raise _Invalid
    stamp = stamp.strip()
    try:
        timestamp = int(stamp) if stamp else ingest_ns()  # Tremor: the event's ingest time
    except ValueError:
        raise _Invalid from None
    return {
        "measurement": _unescape(measurement),
        "tags": {k: _unescape(v) for k, v in _pairs(tags, quotes=False)},
        "fields": fields,
        "timestamp": timestamp,
    }


def build(text: str) -> Any:
    def extract(value: str) -> Any:
        try:
            return parse_line(value)
        except _Invalid:
            return MISSING

    return of_text(extract)
