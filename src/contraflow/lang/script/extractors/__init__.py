"""Tilde extractors: `glob`, `re`, `dissect`, `json`, `base64`, `kv`, `datetime`, `cidr`, `influx`, `grok`.

An extractor is a test and a transformation in one: in a pattern it matches
when it can extract something from the value, and a bound pattern sees the
extracted value in place of the original field. Each extractor is built once
at compile time into a function `value -> extracted | MISSING`.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson

from contraflow.lang.script.extractors import cidr, dissect, grok, influx
from contraflow.lang.script.extractors.text import Extractor, matched, of_text
from contraflow.lang.script.regex import compile_rust
from contraflow.lang.script.values import MISSING


def _glob(text: str) -> Extractor:
    rx = re.compile(fnmatch.translate(text), re.DOTALL)

    return of_text(lambda value: True if rx.match(value) else MISSING)  # Tremor extracts `true`


def _regex(text: str) -> Extractor:
    rx = compile_rust(text)

    def extract(value: str) -> Any:
        m = rx.search(value)
        if m is None:
            return MISSING
        return matched(m.groupdict())

    return of_text(extract)


def _json(text: str) -> Extractor:
    def extract(value: str) -> Any:
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return MISSING

    return of_text(extract)


def _base64(text: str) -> Extractor:
    def extract(value: str) -> Any:
        try:
            return base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return MISSING

    return of_text(extract)


_KV_PAIR = re.compile(r"%\{key\}(.+?)%\{val\}")


def _kv_separators(text: str) -> tuple[list[str], list[str]]:
    """(field separators, key/value separators) of a `kv|...|` pattern, Tremor's defaults filled in.

    `%{key}=%{val}` declares `=` as a key/value separator; any other text declares a
    field separator (`kv|%{key}=%{val}&|` splits `a=1&b=2`). With none given, fields
    are split on a space and keys from values on `:`.
    """
    value_seps = _KV_PAIR.findall(text)
    fields = [part for part in _KV_PAIR.split(text)[::2] if part]
    field_seps = list(dict.fromkeys(fields)) or [" "]
    for sep in value_seps:
        if any(sep in f or f in sep for f in field_seps):
            raise ValueError(f"field and key/value separators overlap: {sep!r}")
    return field_seps, value_seps or [":"]


def _kv(text: str) -> Extractor:
    """Key/value pairs between field separators (see `_kv_separators`)."""
    field_seps, value_seps = _kv_separators(text)
    split_fields = re.compile("|".join(re.escape(f) for f in field_seps))
    split_pair = re.compile("|".join(re.escape(v) for v in value_seps))

    def extract(value: str) -> Any:
        out: dict[str, str] = {}
        for part in split_fields.split(value):
            if not part:
                continue
            pair = split_pair.split(part, maxsplit=1)
            if len(pair) != 2 or not pair[0]:
                return MISSING
            out[pair[0]] = pair[1]
        return out if out else MISSING

    return of_text(extract)


def _datetime(text: str) -> Extractor:
    """Parse with a strftime format; yields nanoseconds since the epoch."""

    def extract(value: str) -> Any:
        try:
            parsed = datetime.strptime(value, text)
        except ValueError:
            return MISSING
        from contraflow.lang.script.stdlib.datetime_ import to_nanos

        return to_nanos(parsed)

    return of_text(extract)


EXTRACTORS: dict[str, Callable[[str], Extractor]] = {
    "dissect": dissect.build,
    "cidr": cidr.build,
    "influx": influx.build,
    "grok": grok.build,
    "glob": _glob,
    "re": _regex,
    "rerg": _regex,
    "json": _json,
    "base64": _base64,
    "kv": _kv,
    "datetime": _datetime,
}


def build_extractor(kind: str, text: str) -> Extractor:
    """The extractor function for `kind|text|`; raises KeyError for unknown kinds, re.error for bad regexes."""
    return EXTRACTORS[kind](text)
