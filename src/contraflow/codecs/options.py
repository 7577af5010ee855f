"""Options shared by several codecs and processors."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NoOptions:
    """For codecs and processors that take no config: any key given is reported as unknown."""
