"""What every tilde extractor is: a function from a value to what it extracts, or `MISSING`.

Tremor's extractors all read strings, so any other value does not match.
`of_text` makes that check once; each extractor is only its parsing of a string.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contraflow.lang.script.values import MISSING

Extractor = Callable[[Any], Any]


def of_text(extract: Callable[[str], Any]) -> Extractor:
    """The extractor that runs `extract` on strings and does not match anything else."""

    def run(value: Any) -> Any:
        return extract(value) if type(value) is str else MISSING

    return run


def matched(captures: dict[str, Any]) -> dict[str, Any]:
    """The named captures that took part in the match (optional groups that did not are left out)."""
    return {name: value for name, value in captures.items() if value is not None}
