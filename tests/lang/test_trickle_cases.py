"""Conformance cases for Trickle: tests/lang/cases/trickle-*/.

Each case directory holds `query.trickle` (one pipeline: `in` -> `out`, `err`)
and either `expected.txt`, the exact `contraflow check` summary of the
pipeline graph, or `error.txt`, one expected substring per line
(`query.trickle:LINE:COL: message`, hints) of the error output.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.lang.compile_cases import check_case, compile_output

from contraflow.lang.commands import summarize
from contraflow.lang.troy.compiler import compile_trickle_file

CASES = Path(__file__).parent / "cases"
TRICKLE_CASES = sorted(p for p in CASES.glob("trickle-*") if p.is_dir())


def run_case(case: Path) -> tuple[str, bool]:
    """(output, ok): the pipeline summary when the query compiles, else the rendered errors."""
    return compile_output(
        case, lambda: summarize(compile_trickle_file(case / "query.trickle", search_path=[]))
    )


@pytest.mark.parametrize("case", TRICKLE_CASES, ids=[p.name for p in TRICKLE_CASES])
def test_trickle_case(case: Path) -> None:
    check_case(case, *run_case(case))


def test_there_are_enough_cases() -> None:
    assert len(TRICKLE_CASES) >= 40
    assert sum((p / "error.txt").exists() for p in TRICKLE_CASES) >= 20
