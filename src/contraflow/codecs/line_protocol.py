"""InfluxDB's line protocol, read and written as Tremor does; shared by the `influx` codec and `influx||`.

`weather,location=us-midwest temperature=82,ok=t 1465839830100400200` is
`{"measurement": "weather", "tags": {"location": "us-midwest"},
"fields": {"temperature": 82.0, "ok": True}, "timestamp": 1465839830100400200}`.
Field values are floats unless written `12i` (integer; `12u` too), `"..."`
(string) or t/T/true/True/TRUE and f/... (bool). A line without a timestamp
gets the caller's `now`. Writing sorts tags and fields by key, as Tremor does.

Escapes: a backslash before any of `\\ , = "` and space in a measurement, tag
or field key, or tag value stands for that character, and the writer escapes
all five, so every value it writes reads back the same (Tremor's reader keeps
some of those backslashes and so cannot read all of its own output back). In
string values only `\\\\` and `\\"` are escapes, as in Tremor.

Most lines have no backslash, and their strings no separators: those take a
path of plain `str.split` calls; the others a scanner of precompiled patterns.
"""

from __future__ import annotations

import math
import re
from typing import Any

_TRUE = frozenset({"t", "T", "true", "True", "TRUE"})
_FALSE = frozenset({"f", "F", "false", "False", "FALSE"})
_INTEGER = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|(?i:inf|infinity|nan))")
_TIMESTAMP = re.compile(r"\+?\d+")
_U64_MAX = 2**64 - 1
_I64 = range(-(2**63), 2**63)

# The scanner's pieces: a name runs to one of its terminators, `\\.` is an escaped character.
_HEAD = re.compile(r"(?:[^\\ ]|\\.)*")
_MEASUREMENT = re.compile(r"(?:[^\\, ]|\\.)*")
_TAG = re.compile(r",((?:[^\\,= ]|\\.)*)=((?:[^\\,= ]|\\.)*)")
# A field: key, then a quoted string or a bare value, then what ends it (`,`, a space or the end).
_FIELD = re.compile(r'((?:[^\\=]|\\.)*)=(?:"((?:[^\\"]|\\.)*)"|((?:[^\\, "]|\\.)+))(,| |\Z)', re.DOTALL)
_NAME_ESCAPE = re.compile(r'\\([\\ ,="])')
_STRING_ESCAPE = re.compile(r'\\([\\"])')
_ANY_ESCAPE = re.compile(r"\\(.)")
_NAME_ESCAPES = str.maketrans({char: "\\" + char for char in '\\ ,="'})
_STRING_ESCAPES = str.maketrans({char: "\\" + char for char in '\\"'})


class LineError(ValueError):
    """The text is not one line of the protocol; the message says where and why."""


def parse_line(text: str, now: int) -> dict[str, Any] | None:
    """The record of one line, None for a blank or `#` comment line; raises `LineError`."""
    line = text.strip()
    if not line or line.startswith("#"):
        return None
    escaped = "\\" in line
    try:
        if escaped:
            raise _NeedsScan
        measurement, tags, fields, stamp = _split_plain(line)
    except _NeedsScan:
        measurement, tags, fields, stamp = _scan(line, escaped)
    return {"measurement": measurement, "tags": tags, "fields": fields, "timestamp": _timestamp(stamp, now)}


def _scan(line: str, escaped: bool) -> tuple[str, dict[str, str], dict[str, Any], str]:
    """The general path: lines with escapes, or with separators inside quoted strings."""
    head_end = _head_end(line) if escaped else line.find(" ")
    if head_end < 0:
        raise LineError("expected a space before the fields")
    measurement, tags = _scan_head(line, head_end) if escaped else _split_head(line[:head_end])
    fields, stamp = _scan_fields(line, head_end + 1, escaped)
    return measurement, tags, fields, stamp


class _NeedsScan(Exception):
    """The line has escapes, or a quoted string holding a separator: `_split_plain` cannot read it."""


def _split_plain(line: str) -> tuple[str, dict[str, str], dict[str, Any], str]:
    """The fast path, for lines without escapes: split at every separator, as long as no quoted
    string turns out to contain one (then it raises `_NeedsScan`)."""
    parts = line.split(" ")
    if len(parts) == 2:
        head, body = parts
        stamp = ""
    elif len(parts) == 3:
        head, body, stamp = parts
    elif '"' in line:
        raise _NeedsScan
    else:
        raise LineError("expected `measurement[,tags] fields [timestamp]` separated by single spaces")
    measurement, tags = _split_head(head)
    fields: dict[str, Any] = {}
    for item in body.split(","):
        key, eq, value = item.partition("=")
        if not eq or not value:
            raise _NeedsScan if '"' in line else LineError(f"field {item!r} has no value")
        if value[0] == '"':
            if len(value) < 2 or value[-1] != '"' or value.count('"') != 2:
                raise _NeedsScan  # a separator inside the string split it
            fields[key] = value[1:-1]
        else:
            fields[key] = _field_value(value)
    return measurement, tags, fields, stamp


def _split_head(head: str) -> tuple[str, dict[str, str]]:
    """Measurement and tags of a head without escapes."""
    measurement, *tag_items = head.split(",")
    tags: dict[str, str] = {}
    for item in tag_items:
        key, eq, value = item.partition("=")
        if not eq:
            raise LineError(f"tag {item!r} has no value")
        if "=" in value:
            raise LineError(f"tag value {value!r} holds an unescaped '='")
        tags[key] = value
    return measurement, tags


def _head_end(line: str) -> int:
    """Where the first unescaped space is (the end of measurement and tags), -1 if there is none."""
    found = _HEAD.match(line)
    assert found is not None  # the pattern matches the empty string
    return found.end() if line.startswith(" ", found.end()) else -1  # else the end or a lone backslash


def _scan_head(line: str, end: int) -> tuple[str, dict[str, str]]:
    """Measurement and tags of `line[:end]`, which has escapes."""
    found = _MEASUREMENT.match(line, 0, end)
    assert found is not None  # the pattern matches the empty string
    measurement, pos = _unescape_name(found.group()), found.end()
    tags: dict[str, str] = {}
    while pos < end:
        tag = _TAG.match(line, pos, end)
        if tag is None:
            raise LineError(f"malformed tag at column {pos + 1} (a tag is `,key=value`)")
        tags[_unescape_name(tag.group(1))] = _unescape_name(tag.group(2))
        pos = tag.end()
    return measurement, tags


def _scan_fields(line: str, pos: int, escaped: bool) -> tuple[dict[str, Any], str]:
    """The fields from `pos` on and the timestamp text after them, for lines with quotes or escapes."""
    fields: dict[str, Any] = {}
    while True:
        found = _FIELD.match(line, pos)
        if found is None:
            raise _field_error(line, pos)
        key, text, raw, separator = found.groups()
        if text is not None:
            value: Any = _STRING_ESCAPE.sub(r"\1", text) if escaped else text
        else:
            value = _field_value(_ANY_ESCAPE.sub(r"\1", raw) if escaped else raw)
        fields[_unescape_name(key) if escaped else key] = value
        pos = found.end()
        if separator != ",":
            return fields, line[pos:]


def _field_error(line: str, pos: int) -> LineError:
    key, eq, value = line[pos:].partition("=")
    if not eq:
        return LineError(f"field {key!r} has no value (column {pos + 1})")
    if value.startswith('"'):
        return LineError(f"unterminated string (column {pos + len(key) + 2})")
    return LineError(f"malformed field value at column {pos + len(key) + 2}")


def _field_value(raw: str) -> Any:
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    if raw[-1] in "iu" and _INTEGER.fullmatch(raw, 0, len(raw) - 1):
        number = int(raw[:-1])
        if raw[-1] == "i" and number not in _I64:
            raise LineError(f"integer field {raw!r} does not fit 64 bits")
        return number
    if _FLOAT.fullmatch(raw):
        return float(raw)
    raise LineError(f"field value {raw!r} is not a number, a boolean or a quoted string")


def _timestamp(stamp: str, now: int) -> int:
    if not stamp:
        return now
    if not _TIMESTAMP.fullmatch(stamp) or int(stamp) > _U64_MAX:
        raise LineError(f"timestamp {stamp!r} is not an unsigned 64-bit integer")
    return int(stamp)


def _unescape_name(text: str) -> str:
    return _NAME_ESCAPE.sub(r"\1", text) if "\\" in text else text


def write_line(value: Any) -> str:
    """The line for a record shaped as `parse_line` returns; raises `LineError` for other shapes."""
    if not isinstance(value, dict):
        raise LineError(f"expected a record with measurement, tags, fields and timestamp, got {_kind(value)}")
    measurement = value.get("measurement")
    if not isinstance(measurement, str) or not measurement:
        raise LineError("'measurement' must be a non-empty string")
    out = [_escape_name(measurement)]
    for key, tag in sorted(_record(value, "tags").items()):
        if not isinstance(tag, str):
            raise LineError(f"tag {key!r} must be a string, got {_kind(tag)}")
        out.append(f",{_escape_name(key)}={_escape_name(tag)}")
    fields = _record(value, "fields")
    if not fields:
        raise LineError("'fields' must hold at least one field")
    out.append(" ")
    out.append(",".join(f"{_escape_name(key)}={_write_field(key, fields[key])}" for key in sorted(fields)))
    timestamp = value.get("timestamp")
    if type(timestamp) is not int or not 0 <= timestamp <= _U64_MAX:
        raise LineError(f"'timestamp' must be an unsigned 64-bit integer, got {_kind(timestamp)}")
    out.append(f" {timestamp}")
    return "".join(out)


def _record(value: dict[str, Any], key: str) -> dict[str, Any]:
    """`tags` or `fields` (a missing `tags` is an empty record)."""
    found = value.get(key, {} if key == "tags" else None)
    if not isinstance(found, dict):
        raise LineError(f"{key!r} must be a record, got {_kind(found)}")
    return found


def _write_field(key: str, field: Any) -> str:
    if isinstance(field, str):
        return '"' + field.translate(_STRING_ESCAPES) + '"'
    if field is True or field is False:
        return "true" if field else "false"
    if isinstance(field, int):
        if field not in _I64:
            raise LineError(f"field {key!r}: integer {field} does not fit 64 bits")
        return f"{field}i"
    if isinstance(field, float) and math.isfinite(field):
        return repr(field)
    raise LineError(f"field {key!r} must be a number, a boolean or a string, got {_kind(field)}")


def _escape_name(text: str) -> str:
    return text.translate(_NAME_ESCAPES)


def _kind(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {value!r}"[:60]
