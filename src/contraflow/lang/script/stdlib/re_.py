"""`re::` functions: `re::replace(regex, input, to)` and friends (Tremor's regex syntax, see `script.regex`)."""

from __future__ import annotations

import re
from typing import Any

from contraflow.lang.script.regex import compile_rust, python_template
from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail


def _compiled(pattern: str) -> re.Pattern[str]:
    try:
        return compile_rust(pattern)
    except re.error as exc:
        fail(f"invalid regular expression {pattern!r}: {exc}")


def _rx(pattern: Any, fn: str) -> re.Pattern[str]:
    return _compiled(want(pattern, str, fn, "regex"))


@tremor_fn("re::replace")
def replace(pattern: Any, s: Any, to: Any) -> str:
    """Replaces the first match."""
    return _rx(pattern, "re::replace").sub(
        python_template(want(to, str, "re::replace")), want(s, str, "re::replace"), count=1
    )


@tremor_fn("re::replace_all")
def replace_all(pattern: Any, s: Any, to: Any) -> str:
    return _rx(pattern, "re::replace_all").sub(
        python_template(want(to, str, "re::replace_all")), want(s, str, "re::replace_all")
    )


@tremor_fn("re::is_match")
def is_match(pattern: Any, s: Any) -> bool:
    return _rx(pattern, "re::is_match").search(want(s, str, "re::is_match")) is not None


@tremor_fn("re::split")
def split(pattern: Any, s: Any) -> list[str]:
    return _rx(pattern, "re::split").split(want(s, str, "re::split"))
