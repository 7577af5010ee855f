"""The columnar json-lines source path gives the records and errors of the frame-by-frame path.

Each case is decoded twice by a real `SourceDecoder` of a file connector (json,
`separate`): as it runs (clean chunks become one `BinaryColumn`) and with the
columnar step switched off (today's split and validation), chunk by chunk,
then compared record for record, error for error, and as encoded log batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from contraflow.connectors.base import SourceData
from contraflow.runtime import wire
from contraflow.runtime.appends import BinaryColumn, ColumnRuns
from contraflow.runtime.json_lines import json_lines_column
from contraflow.runtime.wire import Decoded, SourceDecoder
from contraflow.spu.protocol.batch import decode_batch
from tests.connectors.support import make

EVENTS = [orjson.dumps({"n": i, "text": "ü€😀"[: i % 4] + "x" * (i % 11)}) for i in range(3000)]
HUGE = b'{"huge": "' + b"y" * 10_000 + b'"}'  # over separate's default max_length (8192)

INPUTS = {
    "plain": b"\n".join(EVENTS) + b"\n",
    "empty lines": b"\n\n" + b"\n\n\n".join(EVENTS[:500]) + b"\n\n",
    "no newline at the end": b"\n".join(EVENTS[:500]),
    "unicode": "\n".join(['{"s": "grüße 😀"}', '"日本語"', "[1, 2.5, null]"]).encode() + b"\n",
    "huge line": b"\n".join([*EVENTS[:100], HUGE, *EVENTS[100:200]]) + b"\n",
    "bad line": b"\n".join([*EVENTS[:100], b'{"n": oops}', *EVENTS[100:200]]) + b"\n",
    "bad utf-8": b"\n".join([*EVENTS[:10], b'{"s": "\xff"}', *EVENTS[10:20]]) + b"\n",
    "blank but not empty": b"\n".join([*EVENTS[:10], b"  ", b"\t", *EVENTS[10:20]]) + b"\n",
    "two documents on a line": b"\n".join([*EVENTS[:10], b"{} {}", b"1,2", *EVENTS[10:20]]) + b"\n",
    # Each line bad, yet joined as one array they parse, with one element per line.
    "documents across lines": b"\n".join(
        [*EVENTS[:10], b'{"a":[{"b":1}', b"{}]}", b'{"x":1},{"y":2}', *EVENTS[10:20]]
    )
    + b"\n",
    "spaces around a document": b"\n".join([*EVENTS[:10], b' {"a": 1} ', b"\t[]", *EVENTS[10:20]]) + b"\n",
    "carriage returns": b"\r\n".join(EVENTS[:50]) + b"\r\n",
    "only empty lines": b"\n\n\n",
}


def decoder() -> SourceDecoder:
    connector = make("file", {"path": "unused", "mode": "read"}, codec="json", preprocessors=["separate"])
    return SourceDecoder(connector.ctx, structured=False)


def chunked(data: bytes, cuts: list[int]) -> Iterator[bytes]:
    """`data` cut at `cuts` (fractions of its length in percent), the pieces in order."""
    bounds = [0, *sorted(len(data) * c // 100 for c in cuts), len(data)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        if end > start:
            yield data[start:end]


def records(decoded: Decoded) -> list[tuple[Any, ...]]:
    return [(bytes(v), run.meta, run.port) for run in decoded.runs for v in run.values]


def errors(decoded: Decoded) -> list[tuple[Any, ...]]:
    return [(orjson.loads(e.value), e.meta, e.port) for e in decoded.errors]


def decode_all(chunks: list[bytes]) -> tuple[list[Decoded], Decoded]:
    source = decoder()
    return [source.decode(SourceData(data=c, meta={"k": 1})) for c in chunks], source.finish()


def frame_by_frame(chunks: list[bytes], monkeypatch: pytest.MonkeyPatch) -> tuple[list[Decoded], Decoded]:
    with monkeypatch.context() as patch:
        patch.setattr(wire, "json_lines_column", lambda data, limit: None)
        return decode_all(chunks)


@pytest.mark.parametrize("name", sorted(INPUTS))
@pytest.mark.parametrize("cuts", [[], [50], [13, 37, 61, 89], [1, 2, 3, 98, 99]], ids=str)
def test_every_chunking_gives_the_records_and_errors_of_the_frame_by_frame_path(
    name: str, cuts: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks = list(chunked(INPUTS[name], cuts))
    columnar, columnar_end = decode_all(chunks)
    expected, expected_end = frame_by_frame(chunks, monkeypatch)
    for got, want in zip([*columnar, columnar_end], [*expected, expected_end], strict=True):
        assert records(got) == records(want)
        assert errors(got) == errors(want)
        if got.runs:  # and the log batch appended for the pull is the same, byte for byte
            assert encoded(got) == encoded(want)


def encoded(decoded: Decoded) -> bytes:
    runs = ColumnRuns()
    for run in decoded.runs:
        runs.add(run.values, [("meta", b"1")])
    batch = runs.encode([("marker", b"7")])
    batch[27:43] = bytes(16)  # the batch's timestamps (when it was encoded) and so its CRC
    batch[17:21] = bytes(4)
    return bytes(batch)


def test_a_clean_chunk_becomes_one_column_without_a_list_of_lines() -> None:
    decoded = decoder().decode(SourceData(data=INPUTS["empty lines"], meta={"k": 1}))
    [run] = decoded.runs
    assert isinstance(run.values, BinaryColumn) and run.meta == {"k": 1}
    assert list(run.values) == EVENTS[:500] and run.nbytes == sum(map(len, EVENTS[:500]))


def test_a_chunk_after_a_held_fragment_takes_the_split_and_the_next_whole_chunk_the_column() -> None:
    source = decoder()
    first = source.decode(SourceData(data=EVENTS[0] + b"\n" + EVENTS[1][:5]))
    second = source.decode(SourceData(data=EVENTS[1][5:] + b"\n" + EVENTS[2] + b"\n"))
    third = source.decode(SourceData(data=EVENTS[3] + b"\n"))
    assert [list(r.values) for d in (first, second, third) for r in d.runs] == [
        [EVENTS[0]],
        [EVENTS[1], EVENTS[2]],
        [EVENTS[3]],
    ]
    assert isinstance(third.runs[0].values, BinaryColumn) and isinstance(second.runs[0].values, list)


def test_the_column_is_arrows_binary_layout_and_encodes_as_the_batchs_values() -> None:
    column = json_lines_column(b'\n{"a":1}\n\n[]\n"\xc3\xa9"\n', 8192)
    assert column is not None
    assert column.data == b'{"a":1}[]"\xc3\xa9"'
    assert list(memoryview(column.offsets).cast("i")) == [0, 7, 9, 13]
    runs = ColumnRuns()
    runs.add(column, [])
    assert decode_batch(bytes(runs.encode()), verify=True).values() == [b'{"a":1}', b"[]", b'"\xc3\xa9"']


@pytest.mark.parametrize("limit, taken", [(0, True), (10_012, True), (10_011, False)])
def test_max_length_bounds_the_lines_the_column_takes(limit: int, taken: bool) -> None:
    assert (json_lines_column(HUGE + b"\n", limit) is not None) is taken
