"""TXN_STAGE_RANGE: a lone SPU stages a range of its own partition into a transaction
(`contraflow.spu.server.range_stage`), against a real SPU."""

from __future__ import annotations

import uuid

import pytest

from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.protocol.batch import decode_batch
from contraflow.spu.protocol.range_stage import MIN_RECORDS
from contraflow.spu.protocol.topics import TopicConfig


@pytest.fixture
def topic_name() -> str:
    return f"range-{uuid.uuid4().hex[:8]}"


def _committed(spu: SpuClient, topic: str) -> list[tuple[bytes, list[tuple[str, bytes]], int]]:
    """(value, headers, offset) of every record of partition 0, read back whole."""
    out = []
    offset = 0
    while True:
        result = spu.fetch(topic, 0, offset)
        records = [r for b in result.batches for r in b.records(start_offset=offset)]
        if not records:
            return out
        out += [(r.value, r.headers, r.offset) for r in records]
        offset = records[-1].offset + 1


def test_a_range_is_staged_by_the_spu_as_the_records_it_holds(spu: SpuClient, topic_name: str) -> None:
    source, dest = f"{topic_name}-in", f"{topic_name}-out"
    spu.create_topic(source, TopicConfig())
    spu.create_topic(dest, TopicConfig())
    big = MIN_RECORDS + 5
    headers = [("h", b"v")]
    expected: list[tuple[bytes, list[tuple[str, bytes]]]] = []
    # A big batch with headers, small ones (one with keys, one without headers), another big one.
    for n, (count, with_headers, keyed) in enumerate(
        [(big, True, False), (3, False, True), (4, True, False), (big, False, False)]
    ):
        values = [b"%d-%d" % (n, i) for i in range(count)]
        keys = [b"k"] * count if keyed else None
        spu.produce(source, 0, values, keys=keys, headers=[headers] * count if with_headers else None)
        expected += [(v, headers if with_headers else []) for v in values]
    start, end = 7, len(expected) - 9  # cuts through the first and the last batch

    reply = spu.stage_range("q", 1, dest, 0, (source, 0), start, end, writer="w", sequence=0)
    resent = spu.stage_range("q", 1, dest, 0, (source, 0), start, end, writer="w", sequence=0)
    assert reply["records"] == resent["records"] == end - start
    spu.commit("q", 1, expected_batches=reply["batches"])

    got = _committed(spu, dest)
    assert [(v, h) for v, h, _ in got] == expected[start:end]  # once: the resend was a no-op
    assert [o for _, _, o in got] == list(range(end - start))
    stored = [decode_batch(b.buffer) for b in spu.fetch(dest, 0, 0, max_bytes=64 << 20).batches]
    assert all(b.key_buffers() is None and b.header.producer_id == -1 for b in stored)


def test_a_range_the_log_does_not_hold_is_refused(spu: SpuClient, topic_name: str) -> None:
    spu.create_topic(topic_name, TopicConfig())
    spu.produce(topic_name, 0, [b"a"])
    with pytest.raises(SpuError) as raised:
        spu.stage_range("q", 1, topic_name, 0, (topic_name, 0), 0, 5, writer="w", sequence=0)
    assert raised.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
