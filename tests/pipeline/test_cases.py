"""Conformance cases: tests/pipeline/cases/<name>/ holds query.trickle, in.jsonl and <port>.jsonl.

`in.jsonl` has one event value per line, ingested at its position (0, 1, ...).
Lines that are objects with a `$`-key are driver directives:
`{"$event": v, "ingest_ns": n, "meta": {...}}` (explicit ingest time/metadata),
`{"$tick": n}` (processing time reaches n) and `{"$signal": {node: value}}`
(QoS state the runtime publishes). After the input, processing time moves to
the last pending timer, as `run_local` does. Every output port must emit
exactly the values in its `<port>.jsonl` (no file: nothing); an expected
string `"$SUB:text"` matches any string containing `text`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from contraflow.events import Event, encode_value
from contraflow.pipeline.executor import PipelineExecutor
from contraflow.pipeline.local import compile_query, finish, run_local

CASES = Path(__file__).parent / "cases"
CASE_NAMES = sorted(p.name for p in CASES.iterdir() if p.is_dir())


def directive(line: bytes) -> dict[str, Any] | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if (
        isinstance(value, dict)
        and value
        and all(k.startswith("$") for k in value if k not in ("ingest_ns", "meta"))
    ):
        return value
    return None


def drive(case: Path) -> dict[str, list[Any]]:
    graph = compile_query((case / "query.trickle").read_text(), name="query.trickle", directory=case)
    executor = PipelineExecutor(graph)
    emitted: list[tuple[str, Event]] = []
    index = 0
    for line in (case / "in.jsonl").read_bytes().splitlines():
        line = line.strip()
        if not line:
            continue
        command = directive(line)
        if command is not None and "$tick" in command:
            emitted += executor.tick(command["$tick"])
        elif command is not None and "$signal" in command:
            for node, value in command["$signal"].items():
                executor.signal(node, value)
        elif command is not None and "$event" in command:
            event = Event.from_raw(encode_value(command["$event"]), command.get("meta"))
            emitted += executor.process("in", event, command.get("ingest_ns", index))
            index += 1
        else:
            emitted += executor.process("in", Event.from_raw(line), index)
            index += 1
    emitted += finish(executor)
    out: dict[str, list[Any]] = {port: [] for port in graph.outputs}
    for port, event in emitted:
        out[port].append(event.decoded)
    return out


def expected(case: Path, ports: list[str]) -> dict[str, list[Any]]:
    out = {}
    for port in ports:
        path = case / f"{port}.jsonl"
        lines = path.read_bytes().splitlines() if path.exists() else []
        out[port] = [orjson.loads(line) for line in lines if line.strip()]
    return out


def matches(want: Any, got: Any) -> bool:
    if isinstance(want, str) and want.startswith("$SUB:"):
        return isinstance(got, str) and want[5:] in got
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and want.keys() == got.keys()
            and all(matches(v, got[k]) for k, v in want.items())
        )
    if isinstance(want, list):
        return isinstance(got, list) and len(want) == len(got) and all(map(matches, want, got))
    if isinstance(want, float) and isinstance(got, float):
        return abs(want - got) <= 1e-9 * max(1.0, abs(want))
    return type(want) is type(got) and want == got


def test_there_are_enough_cases() -> None:
    assert len(CASE_NAMES) >= 40


@pytest.mark.parametrize("name", CASE_NAMES)
def test_case(name: str) -> None:
    case = CASES / name
    got = drive(case)
    want = expected(case, list(got))
    for port in got:
        assert matches(want[port], got[port]), f"port {port}: expected {want[port]!r}, got {got[port]!r}"


def input_lines(name: str) -> list[bytes]:
    return [line for line in (CASES / name / "in.jsonl").read_bytes().splitlines() if line.strip()]


PLAIN_CASES = [name for name in CASE_NAMES if not any(directive(line) for line in input_lines(name))]


@pytest.mark.parametrize("name", PLAIN_CASES)
def test_run_local_agrees(name: str) -> None:
    """Cases without driver directives give the same result through `run_local` (what `contraflow query` does)."""
    case = CASES / name
    lines = input_lines(name)
    graph = compile_query((case / "query.trickle").read_text(), name="query.trickle", directory=case)
    local = {port: [e.decoded for e in events] for port, events in run_local(graph, lines).items()}
    assert local == drive(case)
