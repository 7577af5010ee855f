"""A json-lines file through a whole flow (file -> SPU -> Spark -> SPU -> file) writes the same
bytes with the columnar source path as with the frame-by-frame one, and counts and acks the same."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from contraflow.runtime import wire
from tests.runtime.harness import files_through_pass, flow_id, running, wait_for

EVENTS = [{"n": i, "text": "grüße 😀 日本"[: i % 9], "pad": "x" * (i % 300)} for i in range(20_000)]
LINES = [orjson.dumps(e) for e in EVENTS]
HUGE = b'{"huge": "' + b"y" * 10_000 + b'"}'  # over separate's max_length: an error, not an event


def input_bytes() -> bytes:
    """Empty lines, a line too long for `separate`, unicode, and a last line without its newline."""
    body = b"\n".join([b"", *LINES[:7_000], b"", b"", HUGE, *LINES[7_000:]])
    return body  # no newline after the last event: it comes at the end of the file


def run_flow(spark: Any, spu_addr: str, work: Path) -> tuple[bytes, list[int], int]:
    """The sink's file, the source's counters (events, bytes, errors) and its acked pulls."""
    work.mkdir()
    (work / "in.jsonl").write_bytes(input_bytes())
    out = work / "out.jsonl"
    fid = flow_id("columnar")
    found: dict[str, Any] = {}

    async def scenario() -> None:
        async with running(
            spu_addr, spark, work / "data", files_through_pass(fid, work / "in.jsonl", out)
        ) as rt:
            flow = rt.flows[fid]
            await wait_for(
                lambda: out.exists() and out.read_bytes().count(b"\n") >= len(LINES), what="events"
            )
            await wait_for(lambda: flow.acks["input"].pending == 0, what="every pull acked")
            found["counters"] = list(flow.connectors["input"].ctx.metrics.by_port["out"])
            found["acked"] = flow.acks["input"].acked

    asyncio.run(scenario())
    return out.read_bytes(), found["counters"], found["acked"]


def test_the_columnar_source_writes_the_bytes_of_the_frame_by_frame_path(
    spark: Any, spu_addr: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    columnar = run_flow(spark, spu_addr, tmp_path / "columnar")
    with monkeypatch.context() as patch:
        patch.setattr(wire, "json_lines_column", lambda data, limit: None)
        frame_by_frame = run_flow(spark, spu_addr, tmp_path / "frames")
    data, counters, acked = columnar
    assert data == b"".join(line + b"\n" for line in LINES)
    assert counters == [len(LINES), sum(map(len, LINES)), 0]
    assert acked > 0
    assert columnar == frame_by_frame
