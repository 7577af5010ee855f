"""The `dogstatsd` codec: Datadog's DogStatsD v1.2 datagrams, metrics, events and service checks.

`datadog.metric:7|c|@0.1|#env:dev|c:abc` is `{"metric": {"metric":
"datadog.metric", "values": [7.0], "type": "c", "sample_rate": 0.1, "tags":
["env:dev"], "container_id": "abc"}}`; `_e{5,4}:title|text|...` is
`{"event": {"title", "text", ...}}`; `_sc|name|2|...` is `{"service_check":
{"name", "status", ...}}`, with Tremor's key names. Values are always floats,
as in Tremor; an integral one is written without a fraction. Sections the
protocol adds later (`|T...` timestamps of v1.3) are skipped when reading.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError
from contraflow.codecs.statsd_codec import float_text, is_number, parse_float
from contraflow.codecs.string_codec import text, utf8

_TYPES = ("c", "d", "g", "h", "s", "ms")
_DIGITS = re.compile(r"\d+")
_U32_MAX = 2**32 - 1
_EVENT_HEAD = re.compile(rb"_e\{(\d+),(\d+)\}:")
_EXACT_INT = 2**53  # integral floats below this print exactly as integers

# Optional sections after the mandatory part: prefix -> output key; a `None` key marks tags.
_METRIC_SECTIONS = (("@", "sample_rate"), ("#", None), ("c:", "container_id"))
_EVENT_SECTIONS = (
    ("d:", "timestamp"),
    ("h:", "hostname"),
    ("k:", "aggregation_key"),
    ("p:", "priority"),
    ("s:", "source"),
    ("t:", "type"),
    ("#", None),
    ("c:", "container_id"),
)
_CHECK_SECTIONS = (
    ("d:", "timestamp"),
    ("h:", "hostname"),
    ("#", None),
    ("m:", "message"),
    ("c:", "container_id"),
)


def _invalid(reason: str) -> CodecError:
    return CodecError("dogstatsd", f"invalid DogStatsD datagram: {reason}")


def _u32(text: str, what: str) -> int:
    if not _DIGITS.fullmatch(text) or int(text) > _U32_MAX:
        raise _invalid(f"{what} {text!r} is not an unsigned 32-bit integer")
    return int(text)


def _sections(out: dict[str, Any], parts: list[str], known: tuple[tuple[str, str | None], ...]) -> None:
    """Read `|`-separated optional sections into `out`; unknown ones are skipped, as Tremor does."""
    for part in parts:
        for prefix, key in known:
            if part.startswith(prefix):
                text = part[len(prefix) :]
                if key is None:
                    out["tags"] = text.split(",")
                elif key == "sample_rate":
                    out[key] = parse_float(text, "dogstatsd")
                elif key == "timestamp":
                    out[key] = _u32(text, "timestamp")
                else:
                    out[key] = text
                break


def _decode_metric(text: str) -> dict[str, Any]:
    metric, colon, rest = text.partition(":")
    if not colon:
        raise _invalid("no ':' after the metric name")
    raw_values, bar, rest = rest.partition("|")
    if not bar:
        raise _invalid("no '|' after the values")
    values = [parse_float(raw, "dogstatsd") for raw in raw_values.split(":")]
    kind, _, rest = rest.partition("|")
    if kind not in _TYPES:
        raise _invalid(f"unknown metric type {kind!r} (one of {', '.join(_TYPES)})")
    out: dict[str, Any] = {"metric": metric, "values": values, "type": kind}
    _sections(out, rest.split("|") if rest else [], _METRIC_SECTIONS)
    return {"metric": out}


def _decode_event(data: bytes) -> dict[str, Any]:
    head = _EVENT_HEAD.match(data)
    if head is None:
        raise _invalid("an event starts `_e{<title length>,<text length>}:`")
    title_end = head.end() + int(head.group(1))
    text_end = title_end + 1 + int(head.group(2))
    if len(data) < text_end or data[title_end : title_end + 1] != b"|":
        raise _invalid("title and text do not match their lengths")
    rest = data[text_end:]
    if rest and not rest.startswith(b"|"):
        raise _invalid("text longer than its length")
    out: dict[str, Any] = {
        "title": text("dogstatsd", data[head.end() : title_end]),
        "text": text("dogstatsd", data[title_end + 1 : text_end]),
    }
    _sections(out, text("dogstatsd", rest).split("|")[1:], _EVENT_SECTIONS)
    return {"event": out}


def _decode_service_check(text: str) -> dict[str, Any]:
    name, bar, rest = text.partition("|")
    if not bar:
        raise _invalid("no '|' after the service check name")
    status, _, rest = rest.partition("|")
    if not _DIGITS.fullmatch(status) or int(status) > 3:
        raise _invalid(f"status {status!r} is not 0, 1, 2 or 3")
    out: dict[str, Any] = {"name": name, "status": int(status)}
    _sections(out, rest.split("|") if rest else [], _CHECK_SECTIONS)
    return {"service_check": out}


class DogstatsdCodec(Codec):
    name = "dogstatsd"
    mime_types = ("text/plain",)

    def decode(self, data: bytes) -> dict[str, Any]:
        data = bytes(data)
        if data.startswith(b"_e{"):
            return _decode_event(data)
        line = text("dogstatsd", data)
        if line.startswith("_sc|"):
            return _decode_service_check(line[4:])
        return _decode_metric(line)

    def encode(self, value: Any) -> bytes:
        if isinstance(value, dict):
            for key, write in _WRITERS:
                if isinstance(value.get(key), dict):
                    return utf8("dogstatsd", write(value[key]))
        raise _invalid("expected a record with a 'metric', 'event' or 'service_check' record")


def _string(record: dict[str, Any], key: str) -> str:
    found = record.get(key)
    if not isinstance(found, str):
        raise _invalid(f"{key!r} must be a string, got {type(found).__name__}")
    return found


def _value_text(value: Any) -> str:
    if not is_number(value):
        raise _invalid(f"metric values must be numbers, got {type(value).__name__}")
    number = float(value)
    if number.is_integer() and abs(number) < _EXACT_INT:
        return str(int(number))
    return float_text(number, "dogstatsd")


def _optional(record: dict[str, Any], sections: tuple[tuple[str, str | None], ...]) -> str:
    """The optional sections present in `record`, in the order of `sections`."""
    out = []
    for prefix, key in sections:
        if key is None:
            tags = record.get("tags")
            if tags is not None:
                if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
                    raise _invalid("'tags' must be an array of strings")
                out.append("#" + ",".join(tags))
        elif key in record:
            found = record[key]
            if key == "sample_rate":
                if not is_number(found):
                    raise _invalid(f"'sample_rate' must be a number, got {type(found).__name__}")
                text = str(found) if isinstance(found, int) else float_text(found, "dogstatsd")
            elif key == "timestamp":
                if type(found) is not int or not 0 <= found <= _U32_MAX:
                    raise _invalid("'timestamp' must be an unsigned 32-bit integer")
                text = str(found)
            else:
                text = _string(record, key)
            out.append(prefix + text)
    return "".join("|" + part for part in out)


def _write_metric(record: dict[str, Any]) -> str:
    values = record.get("values")
    if not isinstance(values, list) or not values:
        raise _invalid("'values' must be a non-empty array of numbers")
    kind = _string(record, "type")
    numbers = ":".join(_value_text(value) for value in values)
    return f"{_string(record, 'metric')}:{numbers}|{kind}{_optional(record, _METRIC_SECTIONS)}"


def _write_event(record: dict[str, Any]) -> str:
    title, text = _string(record, "title"), _string(record, "text")
    lengths = f"{len(utf8('dogstatsd', title))},{len(utf8('dogstatsd', text))}"
    return f"_e{{{lengths}}}:{title}|{text}{_optional(record, _EVENT_SECTIONS)}"


def _write_service_check(record: dict[str, Any]) -> str:
    status = record.get("status")
    if type(status) is not int or not 0 <= status <= 3:
        raise _invalid("'status' must be 0, 1, 2 or 3")
    return f"_sc|{_string(record, 'name')}|{status}{_optional(record, _CHECK_SECTIONS)}"


_WRITERS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("metric", _write_metric),
    ("event", _write_event),
    ("service_check", _write_service_check),
)
