"""`grok|%{IP:client} %{WORD:method}|`: Logstash grok patterns (the default pattern set of pygrok).

The pattern is compiled once; a value matches when the pattern is found in it,
and the extraction is a record of the named captures (`%{NUMBER:n:int}` and
`:float` convert; captures of optional parts that did not match are left out).
"""

from __future__ import annotations

from typing import Any

from pygrok import Grok

from contraflow.lang.script.extractors.text import matched, of_text
from contraflow.lang.script.values import MISSING


def build(text: str) -> Any:
    try:
        grok = Grok(text)
    except KeyError as exc:
        raise ValueError(f"unknown grok pattern {exc}") from None

    def extract(value: str) -> Any:
        found = grok.match(value)
        if found is None:
            return MISSING
        return matched(found)

    return of_text(extract)
