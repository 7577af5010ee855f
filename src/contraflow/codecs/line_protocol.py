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

Most lines have no backslash and no quote: those take a path of plain
`str.split` calls; the others a scanner of precompiled patterns.
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
_MEASUREMENT = re.compile(r"(?:[^\\, ]|\\.)*")
_TAG_KEY = re.compile(r"(?:[^\\,= ]|\\.)*")
_FIELD_KEY = re.compile(r"(?:[^\\=]|\\.)*")
_STRING_VALUE = re.compile(r'"((?:[^\\"]|\\.)*)"')
_PLAIN_VALUE = re.compile(r"(?:[^\\, ]|\\.)+")
_NAME_ESCAPE = re.compile(r'\\([\\ ,="])')
_STRING_ESCAPE = re.compile(r'\\([\\"])')
_ANY_ESCAPE = re.compile(r"\\(.)")
_NAME_SPECIAL = re.compile(r'([\\ ,="])')
_STRING_SPECIAL = re.compile(r'([\\"])')


class LineError(ValueError):
    """The text is not one line of the protocol; the message says where and why."""


def parse_line(text: str, now: int) -> dict[str, Any] | None:
    """The record of one line, None for a blank or `#` comment line; raises `LineError`."""
    line = text.strip()
    if not line or line.startswith("#"):
        return None
    if "\\" in line or '"' in line:
        measurement, tags, fields, stamp = _scan(line)
    else:
        measurement, tags, fields, stamp = _split_plain(line)
    return {"measurement": measurement, "tags": tags, "fields": fields, "timestamp": _timestamp(stamp, now)}


def _split_plain(line: str) -> tuple[str, dict[str, str], dict[str, Any], str]:
    """The fast path: no escapes and no quoted strings, so every separator is a real one."""
    parts = line.split(" ")
    if len(parts) == 2:
        head, body = parts
        stamp = ""
    elif len(parts) == 3:
        head, body, stamp = parts
    else:
        raise LineError("expected `measurement[,tags] fields [timestamp]` separated by single spaces")
    measurement, *tag_items = head.split(",")
    tags: dict[str, str] = {}
    for item in tag_items:
        key, eq, value = item.partition("=")
        if not eq:
            raise LineError(f"tag {item!r} has no value")
        if "=" in value:
            raise LineError(f"tag value {value!r} holds an unescaped '='")
        tags[key] = value
    fields: dict[str, Any] = {}
    for item in body.split(","):
        key, eq, value = item.partition("=")
        if not eq or not value:
            raise LineError(f"field {item!r} has no value")
        fields[key] = _field_value(value)
    return measurement, tags, fields, stamp


def _scan(line: str) -> tuple[str, dict[str, str], dict[str, Any], str]:
    """The general path, for lines with escapes or quoted strings."""
    found = _MEASUREMENT.match(line)
    assert found is not None  # the pattern matches the empty string
    measurement, pos = _unescape_name(found.group()), found.end()
    tags: dict[str, str] = {}
    while pos < len(line) and line[pos] == ",":
        key, pos = _take(_TAG_KEY, line, pos + 1)
        if pos >= len(line) or line[pos] != "=":
            raise LineError(f"tag {key!r} has no value (column {pos + 1})")
        value, pos = _take(_TAG_KEY, line, pos + 1)
        if pos < len(line) and line[pos] == "=":
            raise LineError(f"tag value holds an unescaped '=' (column {pos + 1})")
        tags[_unescape_name(key)] = _unescape_name(value)
    if pos >= len(line) or line[pos] != " ":
        raise LineError(f"expected a space before the fields (column {pos + 1})")
    fields: dict[str, Any] = {}
    while True:
        key, pos = _take(_FIELD_KEY, line, pos + 1)
        if pos >= len(line):
            raise LineError(f"field {key!r} has no value")
        value, pos = _scan_value(line, pos + 1)
        fields[_unescape_name(key)] = value
        if pos >= len(line):
            return measurement, tags, fields, ""
        if line[pos] == " ":
            return measurement, tags, fields, line[pos + 1 :]


def _take(pattern: re.Pattern[str], line: str, pos: int) -> tuple[str, int]:
    found = pattern.match(line, pos)
    assert found is not None  # every name pattern matches the empty string
    if found.end() < len(line) and line[found.end()] == "\\":
        raise LineError(f"a backslash ends the line (column {found.end() + 1})")
    return found.group(), found.end()


def _scan_value(line: str, pos: int) -> tuple[Any, int]:
    """One field value at `pos` and the position of the ',' or ' ' after it (or the end)."""
    if line.startswith('"', pos):
        found = _STRING_VALUE.match(line, pos)
        if found is None:
            raise LineError(f"unterminated string (column {pos + 1})")
        value: Any = _STRING_ESCAPE.sub(r"\1", found.group(1))
    else:
        found = _PLAIN_VALUE.match(line, pos)
        if found is None:
            raise LineError(f"field without a value (column {pos + 1})")
        value = _field_value(_ANY_ESCAPE.sub(r"\1", found.group()))
    end = found.end()
    if end < len(line) and line[end] not in ", ":
        raise LineError(f"unexpected {line[end]!r} after a field value (column {end + 1})")
    return value, end


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
        return '"' + _STRING_SPECIAL.sub(r"\\\1", field) + '"'
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
    return _NAME_SPECIAL.sub(r"\\\1", text)


def _kind(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {value!r}"[:60]
