"""`dissect|...|`: fields between literal delimiters, with Tremor's dissect token kinds.

| token | meaning |
| --- | --- |
| `%{name}` | the text up to the next delimiter (the last field takes the rest) |
| `%{name:int}`, `%{name:float}` | the same, converted (no match if it does not convert) |
| `%{}`, `%{?name}` | matched, not kept (`&name` can still use a skipped value as a key) |
| `%{+name}` | appended to `name`, joined with the pattern's separator before it (the delimiter, else the padding's chars, else a space) |
| `%{&name}` | stored under the key that the earlier field `name` matched |
| `%{_}`, `%{_(chars)}` | padding: any repetition of a space (or of `chars`) |
| `%{name->}` | Logstash's right padding: the next delimiter may repeat |

Two fields need a delimiter (or padding) between them. The whole value must
match. Mistakes in the pattern are compile errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from contraflow.lang.script.extractors.text import of_text
from contraflow.lang.script.values import MISSING

_TOKEN = re.compile(r"%\{([^}]*)\}")
_PADDING = re.compile(r"_(?:\((.+)\))?")
_TYPES = {"int": int, "float": float}


@dataclass(frozen=True)
class _Field:
    kind: str  # "keep", "skip", "append", "key"
    name: str
    convert: Any = None
    separator: str = " "  # what an append puts before its value


def _field(spec: str) -> _Field:
    spec = spec.strip()
    if not spec:
        return _Field("skip", "")
    kinds = {"?": "skip", "+": "append", "&": "key"}
    kind = kinds.get(spec[0], "keep")
    name = spec[1:].strip() if kind != "keep" else spec
    if not name:
        raise ValueError(f"`%{{{spec}}}` needs a field name")
    name, _, type_name = name.partition(":")
    convert = None
    if type_name:
        if kind == "append":
            raise ValueError(f"`%{{{spec}}}`: appended fields cannot have a type")
        convert = _TYPES.get(type_name.strip())
        if convert is None:
            raise ValueError(f"unknown type `{type_name.strip()}` in `%{{{spec}}}` (int or float)")
    return _Field(kind, name.strip(), convert)


def _compile(text: str) -> tuple[re.Pattern[str], list[_Field]]:
    parts: list[str] = []
    fields: list[_Field] = []
    tokens = list(_TOKEN.finditer(text))
    pos = 0
    previous_was_field = False
    padding = ""
    seen: set[str] = set()
    for i, match in enumerate(tokens):
        literal = text[pos : match.start()]
        if literal:
            parts.append(re.escape(literal))
        spec = match.group(1)
        pad = _PADDING.fullmatch(spec.strip())
        pos = match.end()
        if pad:
            padding = pad.group(1) or " "
            # padding right before a field must be there, or the field before it would take nothing
            next_is_field = i + 1 < len(tokens) and tokens[i + 1].start() == match.end()
            parts.append(f"(?:{re.escape(padding)}){'+' if next_is_field else '*'}")
            previous_was_field = False
            continue
        if previous_was_field and not literal:
            raise ValueError(f"no delimiter between two fields before `%{{{spec}}}`")
        right_pad = spec.rstrip().endswith("->")
        field = _field(spec.rstrip()[:-2] if right_pad else spec)
        if field.kind == "append":
            field = _Field(field.kind, field.name, None, literal or padding or " ")
        padding = ""
        if field.kind == "key" and field.name not in seen:
            raise ValueError(f"`%{{&{field.name}}}` needs an earlier field `{field.name}`")
        seen.add(field.name)
        last = i == len(tokens) - 1 and pos == len(text)
        parts.append("(.*)" if last else "(.*?)")
        fields.append(field)
        previous_was_field = True
        if right_pad:
            end = tokens[i + 1].start() if i + 1 < len(tokens) else len(text)
            delimiter = text[pos:end]
            if delimiter:
                parts.append(f"(?:{re.escape(delimiter)})*")
    parts.append(re.escape(text[pos:]))
    return re.compile("".join(parts), re.DOTALL), fields


def _collect(fields: list[_Field], values: tuple[str, ...]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    matched: dict[str, str] = {}
    for field, value in zip(fields, values, strict=True):
        if field.kind == "key":
            out[matched.get(field.name, field.name)] = value
            continue
        matched[field.name] = value
        if field.kind == "skip":
            continue
        if field.kind == "append":
            out[field.name] = f"{out[field.name]}{field.separator}{value}" if field.name in out else value
        elif field.convert is not None:
            try:
                out[field.name] = field.convert(value)
            except ValueError:
                return None
        else:
            out[field.name] = value
    return out


def build(text: str) -> Any:
    rx, fields = _compile(text)

    def extract(value: str) -> Any:
        m = rx.fullmatch(value)
        if m is None:
            return MISSING
        out = _collect(fields, m.groups())
        return MISSING if out is None else out

    return of_text(extract)
