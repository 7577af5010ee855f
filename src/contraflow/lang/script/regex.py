"""Tremor's regular expressions (Rust `regex` syntax) on Python's `re` engine.

The two syntaxes agree on almost everything scripts use; the spellings that
differ are translated: named groups `(?<name>...)` (Python wants `(?P<name>...)`)
and group references in replacements, `$1`, `$name` and `${name}`.
"""

from __future__ import annotations

import functools
import re

_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<(?![=!])")
_REFERENCE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@functools.lru_cache(maxsize=256)
def compile_rust(pattern: str) -> re.Pattern[str]:
    """`pattern` compiled, Rust named-group syntax accepted (raises `re.error` when invalid)."""
    return re.compile(_NAMED_GROUP.sub("(?P<", pattern))


def python_template(to: str) -> str:
    """A Rust replacement string (`$1`, `$name`, `${name}`) as a Python `re.sub` template."""

    def reference(match: re.Match[str]) -> str:
        return f"\\g<{match.group(1) or match.group(2)}>"

    return _REFERENCE.sub(reference, to.replace("\\", "\\\\"))
