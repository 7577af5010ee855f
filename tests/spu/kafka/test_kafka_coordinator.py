"""The group coordinator's rules, driven directly (deterministic timing): generation
fencing, session timeouts, protocol choice."""

from __future__ import annotations

import asyncio

import pytest

from contraflow.spu.kafka.coordinator import GroupCoordinator, GroupState
from contraflow.spu.kafka.errors import KafkaError, KafkaErrorCode

RANGE_ONLY = [("range", b"meta-r")]
BOTH = [("roundrobin", b"meta-rr"), ("range", b"meta-r")]


def _run(coro_fn):  # one fresh loop per test
    return asyncio.run(coro_fn())


async def _join(coord: GroupCoordinator, member: str = "", protocols=RANGE_ONLY, session_ms: int = 1000):
    return await coord.join("g", member, "client", session_ms, 2000, "consumer", protocols)


def test_generation_fencing_and_protocol_choice() -> None:
    async def scenario() -> None:
        coord = GroupCoordinator(initial_rebalance_delay_s=0.05)
        coord.start()
        first = await _join(coord, protocols=BOTH)
        assert (first.generation, first.protocol, first.leader) == (1, "roundrobin", first.member_id)
        assert await coord.sync("g", 1, first.member_id, [(first.member_id, b"all")]) == b"all"
        coord.check_commit("g", 1, first.member_id)

        # A second member that only knows range: both rejoin, range is the one they share.
        second_join = asyncio.ensure_future(_join(coord, protocols=RANGE_ONLY))
        await asyncio.sleep(0.01)
        with pytest.raises(KafkaError) as rebalancing:
            coord.heartbeat("g", 1, first.member_id)
        assert rebalancing.value.code is KafkaErrorCode.REBALANCE_IN_PROGRESS
        again = await _join(coord, first.member_id, BOTH)
        second = await second_join
        assert again.generation == second.generation == 2
        assert again.protocol == "range" and again.leader == first.member_id
        assert sorted(m for m, _ in again.members) == sorted([first.member_id, second.member_id])
        assert second.members == []  # only the leader sees the members' metadata

        # Generation 1 is over: its commits and heartbeats are fenced.
        with pytest.raises(KafkaError) as fenced:
            coord.check_commit("g", 1, first.member_id)
        assert fenced.value.code is KafkaErrorCode.ILLEGAL_GENERATION
        follower_sync = asyncio.ensure_future(coord.sync("g", 2, second.member_id, []))
        leader_sync = await coord.sync(
            "g", 2, first.member_id, [(first.member_id, b"p0"), (second.member_id, b"p1")]
        )
        assert (leader_sync, await follower_sync) == (b"p0", b"p1")
        coord.check_commit("g", 2, second.member_id)
        with pytest.raises(KafkaError) as unknown:
            coord.heartbeat("g", 2, "nobody")
        assert unknown.value.code is KafkaErrorCode.UNKNOWN_MEMBER_ID
        coord.stop()

    _run(scenario)


def test_silent_member_is_removed_after_its_session_timeout() -> None:
    async def scenario() -> None:
        coord = GroupCoordinator(initial_rebalance_delay_s=0.05)
        coord.start()
        a = await _join(coord, session_ms=1000)
        b_join = asyncio.ensure_future(_join(coord, session_ms=1000))
        await asyncio.sleep(0.01)
        a2 = await _join(coord, a.member_id, session_ms=1000)
        b = await b_join
        await coord.sync("g", 2, a2.member_id, [])
        await coord.sync("g", 2, b.member_id, [])
        # Only `a` keeps heart-beating; `b` goes quiet for longer than its session.
        for _ in range(8):
            await asyncio.sleep(0.2)
            try:
                coord.heartbeat("g", 2, a.member_id)
            except KafkaError as err:
                assert err.code is KafkaErrorCode.REBALANCE_IN_PROGRESS
                break
        else:
            raise AssertionError("the quiet member was never expired")
        rejoined = await _join(coord, a.member_id, session_ms=1000)
        assert rejoined.generation == 3 and [m for m, _ in rejoined.members] == [a.member_id]
        coord.stop()

    _run(scenario)


def test_joins_that_cannot_agree_are_refused() -> None:
    async def scenario() -> None:
        coord = GroupCoordinator(initial_rebalance_delay_s=0.01)
        coord.start()
        await _join(coord, protocols=RANGE_ONLY)
        with pytest.raises(KafkaError) as inconsistent:
            await _join(coord, protocols=[("sticky", b"")])
        assert inconsistent.value.code is KafkaErrorCode.INCONSISTENT_GROUP_PROTOCOL
        with pytest.raises(KafkaError) as bad_timeout:
            await _join(coord, session_ms=10)
        assert bad_timeout.value.code is KafkaErrorCode.INVALID_SESSION_TIMEOUT
        with pytest.raises(KafkaError) as bad_id:
            await coord.join("bad/group", "", "c", 6000, 6000, "consumer", RANGE_ONLY)
        assert bad_id.value.code is KafkaErrorCode.INVALID_GROUP_ID
        leaving = coord.describe("g")
        assert leaving is not None and leaving.state is GroupState.COMPLETING_REBALANCE
        coord.leave("g", next(iter(leaving.members)))
        assert leaving.state is GroupState.EMPTY
        coord.stop()

    _run(scenario)


def test_producer_table_answers_kafka_retries_refuses_gaps_and_stays_bounded() -> None:
    """The node's one producers' table, with a Kafka producer's record sequences."""
    from contraflow.spu.node.idempotence.producers import (
        OutOfOrderSequence,
        ProducerTable,
        SequencedBatch,
        StaleProducerEpoch,
    )
    from contraflow.spu.protocol.idempotence import KAFKA_WINDOW, ProducerKey

    table = ProducerTable(max_tracked=2)
    tp, key = ("t", 0), ProducerKey("kafka", 7)
    assert table.duplicate(tp, key, 0, 0, 2) is None
    table.record(tp, key, 0, SequencedBatch(0, 2, 100, 102), KAFKA_WINDOW)
    assert table.duplicate(tp, key, 0, 0, 2) == (100, 102)  # a retry gets its first offsets
    assert table.duplicate(tp, key, 0, 3, 3) is None  # the next batch in order
    with pytest.raises(OutOfOrderSequence):
        table.duplicate(tp, key, 0, 9, 9)
    table.record(tp, key, 1, SequencedBatch(0, 0, 200, 200), KAFKA_WINDOW)  # a newer epoch starts over
    with pytest.raises(StaleProducerEpoch):
        table.duplicate(tp, key, 0, 3, 3)
    table.record(tp, ProducerKey("kafka", 8), 0, SequencedBatch(0, 0, 1, 1), KAFKA_WINDOW)
    table.record(tp, ProducerKey("kafka", 9), 0, SequencedBatch(0, 0, 2, 2), KAFKA_WINDOW)  # 7 is forgotten
    assert table.duplicate(tp, key, 0, 42, 42) is None
