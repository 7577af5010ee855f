"""The `statsd` codec: one StatsD line, `sam:7|c|@0.1`, as `{"metric", "type", "value", "sample_rate"}`.

Types `c`, `ms`, `g`, `h`, `s`. As in Tremor, a value with a `.` is a float,
other values integers; a gauge written `+3` or `-3` gets `"action": "add"` or
`"sub"` and the value 3. Floats are written so they always read back as floats
(`1.0e+16`, never `1e16`, which Tremor would then fail to read).
"""

from __future__ import annotations

import math
import re
from typing import Any

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError
from contraflow.codecs.string_codec import text, utf8

FLOAT = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SIGNED = re.compile(r"-\d+")
_UNSIGNED = re.compile(r"\d+")
_I64 = range(-(2**63), 2**63)
_U64 = range(2**64)
_TYPES = ("c", "ms", "g", "h", "s")
_ACTIONS = {"add": "+", "sub": "-"}


def is_number(value: Any) -> bool:
    """An int or a float, not a bool (which Python counts as an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_float(text: str, codec: str) -> float:
    if not FLOAT.fullmatch(text):
        raise CodecError(codec, f"{text!r} is not a number")
    return float(text)


def float_text(value: float, codec: str) -> str:
    """`repr`, with a `.` even in exponent form so the number reads back as a float."""
    if not math.isfinite(value):
        raise CodecError(codec, f"cannot write {value} (the format has no NaN or infinity)")
    text = repr(value)
    return text if "." in text else text.replace("e", ".0e")


def number_text(value: Any, codec: str) -> str:
    if isinstance(value, float):
        return float_text(value, codec)
    if value not in _I64 and value not in _U64:
        raise CodecError(codec, f"integer {value} does not fit 64 bits")
    return str(value)


class StatsdCodec(Codec):
    name = "statsd"
    mime_types = ("text/plain",)

    def decode(self, data: bytes) -> dict[str, Any]:
        metric, colon, rest = text("statsd", data).partition(":")
        if not colon:
            raise self._invalid("no ':' after the metric name")
        sign = rest[:1] if rest[:1] in "+-" else ""
        raw, bar, rest = rest.removeprefix("+").partition("|")
        if not bar:
            raise self._invalid("no '|' after the value")
        value = self._value(raw)
        kind = "ms" if rest.startswith("ms") else rest[:1]
        if kind not in _TYPES:
            raise self._invalid(f"unknown type {rest.partition('|')[0]!r} (one of {', '.join(_TYPES)})")
        rest = rest[len(kind) :]
        out: dict[str, Any] = {"metric": metric, "type": kind}
        if kind == "g" and sign:
            out["action"] = "add" if sign == "+" else "sub"
            if sign == "-":
                value = -value
        if rest.startswith("|@"):
            out["sample_rate"] = parse_float(rest[2:], "statsd")
        elif rest:
            raise self._invalid(f"unexpected {rest!r} after the type")
        out["value"] = value
        return out

    def _value(self, raw: str) -> int | float:
        if "." in raw:
            return parse_float(raw, "statsd")
        if not (_SIGNED if raw.startswith("-") else _UNSIGNED).fullmatch(raw):
            raise self._invalid(f"value {raw!r} is not a number")
        number = int(raw)
        if number not in _I64 and number not in _U64:
            raise self._invalid(f"value {raw!r} does not fit 64 bits")
        return number

    @staticmethod
    def _invalid(reason: str) -> CodecError:
        return CodecError("statsd", f"invalid StatsD line: {reason}")

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, dict):
            raise self._invalid(f"expected a record, got {type(value).__name__}")
        metric, kind, number = value.get("metric"), value.get("type"), value.get("value")
        if not isinstance(metric, str) or not isinstance(kind, str) or not is_number(number):
            raise self._invalid("needs a string 'metric', a string 'type' and a numeric 'value'")
        action = value.get("action")
        sign = _ACTIONS.get(action, "") if kind == "g" and isinstance(action, str) else ""
        line = f"{metric}:{sign}{number_text(number, 'statsd')}|{kind}"
        rate = value.get("sample_rate")
        if rate is not None:
            if not is_number(rate):
                raise self._invalid(f"'sample_rate' must be a number, got {type(rate).__name__}")
            line += f"|@{number_text(rate, 'statsd')}"
        return utf8("statsd", line)
