"""Per-test names for Spark tests; the SPU and Spark session fixtures live in tests/conftest.py."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

_names = itertools.count()


@pytest.fixture()
def topic_name() -> str:
    return f"t{next(_names)}"


@pytest.fixture()
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")
