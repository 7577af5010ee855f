"""Trickle queries run over events: tests/lang/cases/run-*/.

Each case holds `query.trickle` (modules it `use`s sit next to it), `in.jsonl`
(events into `in`), and `out.jsonl` with the events expected on `out`, in
order; `err.jsonl`, when present, lists the events expected on `err`. The
query runs in this process (`run_local`, the reference for the Spark runner).
A case with a file `events-only` (Tremor's own query tests, with their inputs
and outputs) leaves out what timers pending at the end would emit, as Tremor's
test harness does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from contraflow.events import Event
from contraflow.lang.troy.compiler import compile_trickle_file
from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.local import run_local

CASES = sorted(p for p in (Path(__file__).parent / "cases").glob("run-*") if p.is_dir())


def _jsonl(path: Path) -> list[Any]:
    return [orjson.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _canonical(values: list[Any]) -> list[bytes]:
    return [orjson.dumps(v, option=orjson.OPT_SORT_KEYS) for v in values]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_run_case(case: Path) -> None:
    graph = compile_trickle_file(case / "query.trickle", search_path=[])
    out = run_local(
        graph, (case / "in.jsonl").read_text().splitlines(), flush=not (case / "events-only").exists()
    )
    assert _canonical([e.decoded for e in out["out"]]) == _canonical(_jsonl(case / "out.jsonl"))
    if (case / "err.jsonl").exists():
        errors = [e.decoded for e in out.get("err", [])]
        expected = _jsonl(case / "err.jsonl")
        assert len(errors) == len(expected), errors
        for got, want in zip(errors, expected, strict=True):
            assert all(str(v) in str(got.get(k)) for k, v in want.items()), (got, want)


@pytest.mark.parametrize("name", ["run-window-state-by-two", "run-window-state-exclude"])
def test_state_window_state_survives_a_restore(name: str) -> None:
    """A state window's per-group state is part of the snapshot: stopping after any event and
    restoring into a fresh executor gives the same output as one uninterrupted run."""
    case = Path(__file__).parent / "cases" / name
    graph = compile_trickle_file(case / "query.trickle", search_path=[])
    lines = (case / "in.jsonl").read_text().splitlines()
    expected = _canonical([e.decoded for e in run_local(graph, lines)["out"]])
    for cut in range(1, len(lines)):
        first = PipelineExecutor(graph)
        out = [
            ev
            for i, line in enumerate(lines[:cut])
            for _, ev in first.process("in", Event.from_raw(line.encode()), i)
        ]
        second = PipelineExecutor(graph)
        second.restore(orjson.loads(orjson.dumps(first.snapshot())))
        out += [
            ev
            for i, line in enumerate(lines[cut:], cut)
            for _, ev in second.process("in", Event.from_raw(line.encode()), i)
        ]
        assert _canonical([e.decoded for e in out]) == expected, cut
