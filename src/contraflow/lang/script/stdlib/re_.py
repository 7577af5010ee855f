"""`re::` functions: `re::replace(regex, input, to)` and friends (Python `re` syntax)."""

from __future__ import annotations

import functools
import re
from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        fail(f"invalid regular expression {pattern!r}: {exc}")


def _rx(pattern: Any, fn: str) -> re.Pattern[str]:
    return _compiled(want(pattern, str, fn, "regex"))


def _template(to: str) -> str:
    """Tremor (Rust regex) writes group references as `$1`/`${name}`; Python as `\\1`/`\\g<name>`."""
    out = to.replace("\\", "\\\\")
    out = re.sub(r"\$\{(\w+)\}", r"\\g<\1>", out)
    return re.sub(r"\$(\d+)", r"\\g<\1>", out)


@tremor_fn("re::replace")
def replace(pattern: Any, s: Any, to: Any) -> str:
    """Replaces the first match."""
    return _rx(pattern, "re::replace").sub(
        _template(want(to, str, "re::replace")), want(s, str, "re::replace"), count=1
    )


@tremor_fn("re::replace_all")
def replace_all(pattern: Any, s: Any, to: Any) -> str:
    return _rx(pattern, "re::replace_all").sub(
        _template(want(to, str, "re::replace_all")), want(s, str, "re::replace_all")
    )


@tremor_fn("re::is_match")
def is_match(pattern: Any, s: Any) -> bool:
    return _rx(pattern, "re::is_match").search(want(s, str, "re::is_match")) is not None


@tremor_fn("re::split")
def split(pattern: Any, s: Any) -> list[str]:
    return _rx(pattern, "re::split").split(want(s, str, "re::split"))
