"""The bulk path of a flow: frames validated per pull, records appended as columns, sinks fed whole fetches."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from contraflow.connectors.base import SourceData
from contraflow.runtime.appends import ColumnRuns
from contraflow.runtime.wire import SinkEncoder, SourceDecoder, join_values, validate_json_frames
from contraflow.spu.protocol.batch import binary_buffers, decode_batch, encode_batch
from tests.connectors.support import make
from tests.runtime.harness import flow_id, read_events, running, troy, wait_for

LINES = [orjson.dumps({"n": i, "text": "x" * (i % 7)}) for i in range(5000)]


def decoder(codec: str = "json") -> SourceDecoder:
    connector = make("file", {"path": "unused", "mode": "read"}, codec=codec, preprocessors=["separate"])
    return SourceDecoder(connector.ctx, structured=False)


def test_valid_frames_pass_as_they_are_and_blank_lines_are_dropped() -> None:
    assert validate_json_frames(LINES) is LINES
    assert validate_json_frames([LINES[0], b"", b"  ", LINES[1]]) == [LINES[0], LINES[1]]


@pytest.mark.parametrize(
    "bad", [b'{"n": 1', b'{"n": tru}', b'{"s": "\xff"}', b"[1,]", b'{"a":1} trailing', b"NaN"]
)
def test_one_bad_frame_sends_the_pull_through_the_frame_by_frame_check(bad: bytes) -> None:
    assert validate_json_frames([*LINES[:10], bad, *LINES[10:20]]) is None


def test_a_bad_frame_in_a_large_pull_becomes_one_error_and_every_other_frame_a_record() -> None:
    data = b"\n".join([*LINES[:2500], b'{"broken": ', *LINES[2500:]]) + b"\n"
    decoded = decoder().decode(SourceData(data=data))
    assert [v for run in decoded.runs for v in run.values] == LINES
    assert len(decoded.errors) == 1
    error = orjson.loads(decoded.errors[0].value)
    assert error["data"] == '{"broken": ' and "invalid json" in error["error"]
    assert decoded.errors[0].port == "err"


def test_a_clean_pull_is_one_run_of_the_frames_read() -> None:
    decoded = decoder().decode(SourceData(data=b"\n".join(LINES) + b"\n", meta={"k": 1}))
    assert (
        len(decoded.runs) == 1 and list(decoded.runs[0].values) == LINES and decoded.runs[0].meta == {"k": 1}
    )


def test_column_runs_encode_each_run_headers_and_the_marker_on_the_last_record() -> None:
    runs = ColumnRuns()
    runs.add(LINES[:3], [])
    runs.add(LINES[3:5], [("meta", b'{"m":1}')])
    runs.add(LINES[5:7], [("meta", b'{"m":1}')])  # same headers: joins the run before
    batch = decode_batch(bytes(runs.encode([*runs.last_headers, ("marker", b"7")])), verify=True)
    assert [r.value for r in batch.records()] == LINES[:7]
    assert [r.headers for r in batch.records()] == [
        [],
        [],
        [],
        *[[("meta", b'{"m":1}')]] * 3,
        [("meta", b'{"m":1}'), ("marker", b"7")],
    ]
    assert len(runs.runs) == 2
    assert list(runs.records())[3] == (LINES[3], [("meta", b'{"m":1}')])


def test_runs_without_headers_encode_no_headers_column() -> None:
    runs = ColumnRuns()
    runs.add(LINES[:100], [])
    batch = decode_batch(bytes(runs.encode()))
    assert batch.header_buffers() is None
    assert batch.values() == LINES[:100]


def test_binary_column_is_arrows_layout() -> None:
    offsets, data = binary_buffers([b"ab", b"", b"cde"])
    assert data == b"abcde"
    assert list(memoryview(offsets).cast("i")) == [0, 2, 2, 5]


@pytest.mark.parametrize("separator", [b"\n", b"|", b""])
@pytest.mark.parametrize("first", [0, 1, 4999])
def test_join_values_is_each_value_followed_by_the_separator(separator: bytes, first: int) -> None:
    batch = decode_batch(bytes(encode_batch(LINES)))
    offsets, data = batch.value_buffers()
    assert join_values(offsets, data, first, separator) == b"".join(v + separator for v in LINES[first:])


def test_the_bulk_separator_is_only_offered_where_values_go_out_as_they_are() -> None:
    def separator(codec: str, post: list[object]) -> bytes | None:
        sink = make("file", {"path": "x", "mode": "write"}, codec=codec, postprocessors=post)  # type: ignore[arg-type]
        return SinkEncoder(sink.ctx, structured=False).bulk_separator

    assert separator("json", ["separate"]) == b"\n"
    assert separator("json", [("separate", {"separator": "|"})]) == b"|"
    assert separator("json", []) == b""
    assert separator("json", ["separate", "base64"]) is None
    assert separator("string", ["separate"]) is None


def test_a_bad_line_in_a_large_file_goes_to_err_and_every_other_event_arrives(
    spark, spu_addr, tmp_path: Path
) -> None:
    events = [{"n": i, "msg": f"event number {i}"} for i in range(30_000)]
    lines = [orjson.dumps(e) for e in events]
    (tmp_path / "in.jsonl").write_bytes(
        b"\n".join([*lines[:12_345], b'{"n": oops}', *lines[12_345:]]) + b"\n"
    )
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    fid = flow_id("bulk")
    source = troy(
        fid,
        f"""
  create connector input from lines with path = "{tmp_path}/in.jsonl" end;
  create connector output from lines with path = "{out}", mode = "truncate" end;
  create connector failed from lines with path = "{errors}", mode = "truncate" end;
  create pipeline pass;
  define pipeline errors pipeline select event from in into out; end;
  create pipeline errors;
  connect /connector/input to /pipeline/pass;
  connect /pipeline/pass to /connector/output;
  connect /connector/input/err to /pipeline/errors;
  connect /pipeline/errors to /connector/failed;
""",
    )

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", source) as runtime:
            await wait_for(lambda: len(read_events(out)) >= len(events), what="every good event")
            await wait_for(lambda: len(read_events(errors)) >= 1, what="the error event")
            flow = runtime.flows[fid]
            # Acked only once delivered: the whole file, bad line included, once every event arrived.
            await wait_for(lambda: flow.acks["input"].pending == 0, what="acks")

    asyncio.run(scenario())
    assert read_events(out) == events
    [error] = read_events(errors)
    assert error["data"] == '{"n": oops}' and "invalid json" in error["error"]
