"""The log connector against a real SPU: tailing with acks committing the consumer offset, and
exactly-once produce across a simulated restart."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from contraflow.connectors.base import ConnectionLost, ConnectorConfigError
from contraflow.connectors.log import LogConnector
from contraflow.runtime.wire import Decoded, SourceDecoder
from contraflow.spu.client import SpuClient
from tests.connectors.support import eventually, make, run, sink_event


def log(spu_addr: str, **config: object) -> LogConnector:
    conn = make("log", dict(config), spu_addr=spu_addr)
    assert isinstance(conn, LogConnector)
    return conn


def records(spu: SpuClient, topic: str) -> list[bytes]:
    result = spu.fetch(topic, 0, 0)
    return [r.value for b in result.batches for r in b.records()]


@dataclass
class Pulled:
    """One record as a pull handed it out, with the token and position of that pull."""

    value: bytes
    meta: dict[str, Any]
    token: Any
    position: Any

    @property
    def offset(self) -> int:
        return int(self.meta["log"]["offset"])


async def pull_records(conn: LogConnector, count: int) -> list[Pulled]:
    """Pull until `count` records came out (a pull hands out every record it has ready)."""
    out: list[Pulled] = []
    while len(out) < count:
        item = await conn.pull()
        assert item is not None and item.chunks is not None and item.data is None
        out.extend(Pulled(value, meta, item.token, item.position) for value, meta in item.chunks)
    assert len(out) == count
    return out


async def pull_once(conn: LogConnector) -> list[Pulled]:
    """The records of one pull."""
    item = await conn.pull()
    assert item is not None and item.chunks is not None
    return [Pulled(value, meta, item.token, item.position) for value, meta in item.chunks]


def test_source_hands_out_every_ready_record_in_one_pull_and_acks_commit_the_consumer_offset(
    spu: SpuClient, spu_addr: str, topic: str
) -> None:
    spu.produce(topic, 0, [f'{{"n":{i}}}'.encode() for i in range(6)], keys=[b"k"] * 6)

    async def first_run() -> None:
        conn = log(spu_addr, topic=topic, consumer="reader")
        await conn.connect()
        pulled = await pull_once(conn)  # one pull, one append by the runtime: not six round trips
        assert [p.value for p in pulled] == [f'{{"n":{i}}}'.encode() for i in range(6)]
        assert [p.offset for p in pulled] == list(range(6))  # each record with its own `$log`
        assert pulled[0].meta["log"] == {
            "topic": topic,
            "partition": 0,
            "offset": 0,
            "timestamp": pulled[0].meta["log"]["timestamp"],
            "key": "k",
        }
        assert pulled[0].position == {"0": 6}
        await conn.ack(pulled[0].token)  # the pull's token covers its records
        await eventually(lambda: spu.fetch_offset("reader", topic, 0) == 6)
        # New records are pushed to a waiting pull without polling.
        waiting = asyncio.create_task(conn.pull())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await asyncio.to_thread(spu.produce, topic, 0, [b'{"n":6}'])
        late = await asyncio.wait_for(waiting, 5)
        assert late is not None and late.chunks is not None
        assert [value for value, _ in late.chunks] == [b'{"n":6}']
        await conn.close()  # not acknowledged: read again by the next run

    async def second_run() -> list[int]:
        conn = log(spu_addr, topic=topic, consumer="reader")
        await conn.connect()
        offsets = [p.offset for p in await pull_records(conn, 1)]
        await conn.close()
        return offsets

    run(first_run())
    assert run(second_run()) == [6]  # resumes after the committed prefix


def test_fail_rewinds_to_the_failed_pull(spu: SpuClient, spu_addr: str, topic: str) -> None:
    spu.produce(topic, 0, [b"a"])

    async def body() -> list[bytes]:
        conn = log(spu_addr, topic=topic, start="earliest")
        await conn.connect()
        a = await pull_once(conn)
        await asyncio.to_thread(spu.produce, topic, 0, [b"b", b"c"])
        b_c = await pull_records(conn, 2)
        await conn.ack(a[0].token)
        await conn.fail(b_c[0].token)
        again = await pull_records(conn, 2)
        await conn.close()
        return [p.value for p in again]

    assert run(body()) == [b"b", b"c"]


def test_start_latest_skips_what_is_already_there(spu: SpuClient, spu_addr: str, topic: str) -> None:
    spu.produce(topic, 0, [b"old"])

    async def body() -> bytes | None:
        conn = log(spu_addr, topic=topic, start="latest", consumer="fresh")
        await conn.connect()
        waiting = asyncio.create_task(conn.pull())
        await asyncio.sleep(0.1)
        await asyncio.to_thread(spu.produce, topic, 0, [b"new"])
        item = await asyncio.wait_for(waiting, 5)
        await conn.close()
        return item.chunks[0][0] if item and item.chunks else None

    assert run(body()) == b"new"


def test_sink_writes_each_channel_offset_exactly_once_across_restarts(
    spu: SpuClient, spu_addr: str, topic: str
) -> None:
    def batch(offsets: range) -> list:
        return [
            sink_event({"n": i}, {"log": {"key": f"k{i}"}}, frames=[f"{i}".encode()], offset=i)
            for i in offsets
        ]

    async def crashed_run() -> None:
        conn = log(spu_addr, topic=topic)
        await conn.connect()
        await conn.send(batch(range(0, 3)))
        await conn.send(batch(range(3, 5)))
        await conn.close()  # the runtime dies before committing its channel offsets

    async def restarted_run() -> None:
        conn = log(spu_addr, topic=topic)
        await conn.connect()
        await conn.send(batch(range(0, 8)))  # redelivered from offset 0, batched differently
        await conn.send(batch(range(6, 10)))  # a retry overlapping what was just written
        await conn.close()

    run(crashed_run())
    run(restarted_run())
    assert records(spu, topic) == [f"{i}".encode() for i in range(10)]
    keys = [r.key for b in spu.fetch(topic, 0, 0).batches for r in b.records()]
    assert keys == [f"k{i}".encode() for i in range(10)]


def test_sink_without_channel_offsets_produces_plainly(spu: SpuClient, spu_addr: str, topic: str) -> None:
    async def body() -> None:
        conn = log(spu_addr, topic=topic)
        await conn.connect()
        await conn.send([sink_event("x", frames=[b"x"]), sink_event("y", frames=[b"y"])])
        await conn.close()

    run(body())
    assert records(spu, topic) == [b"x", b"y"]


def test_missing_topic_and_bad_config_are_reported(spu_addr: str) -> None:
    async def body() -> None:
        conn = log(spu_addr, topic="no-such-topic")
        with pytest.raises(ConnectorConfigError, match="topic 'no-such-topic' does not exist"):
            await conn.connect()

    run(body())
    with pytest.raises(
        ConnectorConfigError, match="connector 'c' \\(log\\): config key 'start' must be one of"
    ):
        LogConnector.check_config("c", {"topic": "t", "start": "beginning"})
    with pytest.raises(ConnectorConfigError, match="missing config key 'topic'"):
        LogConnector.check_config("c", {})


def test_source_survives_an_spu_restart_without_gaps_or_duplicates(tmp_path: Path) -> None:
    from contraflow.spu.embedded import EmbeddedSpu

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{probe.getsockname()[1]}"
    spu = EmbeddedSpu(tmp_path / "spu", mode="thread", public_addr=addr)
    spu.start()
    with SpuClient(addr) as admin:
        admin.create_topic("restarts")
        admin.produce("restarts", 0, [b"0", b"1", b"2"])

    async def body() -> list[int]:
        conn = log(addr, topic="restarts")
        await conn.connect()
        offsets = [p.offset for p in await pull_records(conn, 3)]
        await asyncio.to_thread(spu.stop)
        with pytest.raises(ConnectionLost):  # the SPU stays away past the client's retries
            await conn.pull()
        await asyncio.to_thread(spu.start)  # back, same data, same address
        with SpuClient(addr) as admin:
            await asyncio.to_thread(admin.produce, "restarts", 0, [b"3"])
        # the runtime pulls again after reconnecting
        offsets.extend(p.offset for p in await pull_records(conn, 1))
        await conn.close()
        return offsets

    try:
        assert run(body(), timeout=60) == [0, 1, 2, 3]
    finally:
        spu.stop()


def test_source_reads_every_partition_and_commits_each(spu: SpuClient, spu_addr: str) -> None:
    from contraflow.spu.protocol.topics import TopicConfig

    spu.create_topic("multi", TopicConfig(partitions=3))
    for p in range(3):
        spu.produce("multi", p, [f"{p}-{i}".encode() for i in range(4)])

    async def body() -> None:
        conn = log(spu_addr, topic="multi", consumer="all")
        await conn.connect()
        items = await pull_records(conn, 12)
        got = sorted(i.value for i in items)
        assert got == sorted(f"{p}-{i}".encode() for p in range(3) for i in range(4))
        by_partition: dict[int, list[Pulled]] = {}
        for item in items:
            by_partition.setdefault(item.meta["log"]["partition"], []).append(item)
        assert all([i.offset for i in part] == [0, 1, 2, 3] for part in by_partition.values())  # in order
        for item in by_partition[0] + by_partition[1]:
            await conn.ack(item.token)
        await conn.fail(by_partition[2][1].token)  # partition 2 is read again from its failed pull
        failed_from = by_partition[2][1].token[1]
        again = await pull_records(conn, 4 - failed_from)
        assert [(a.meta["log"]["partition"], a.offset) for a in again] == [
            (2, offset) for offset in range(failed_from, 4)
        ]
        await eventually(lambda: [spu.fetch_offset("all", "multi", p) for p in range(3)] == [4, 4, None])
        await conn.close()

    run(body())

    async def one_partition() -> list[bytes | None]:
        conn = log(spu_addr, topic="multi", partition=1, consumer="one")
        await conn.connect()
        items = await pull_records(conn, 4)
        await conn.close()
        return [i.value for i in items]

    assert run(one_partition()) == [f"1-{i}".encode() for i in range(4)]

    async def out_of_range() -> None:
        conn = log(spu_addr, topic="multi", partition=3)
        with pytest.raises(
            ConnectorConfigError, match="config key 'partition' is 3, but topic 'multi' has 3"
        ):
            await conn.connect()

    run(out_of_range())


def test_resume_continues_after_what_reached_the_channel_log(
    spu: SpuClient, spu_addr: str, topic: str
) -> None:
    spu.produce(topic, 0, [b"a", b"b"])

    async def body() -> list[int]:
        first = log(spu_addr, topic=topic, consumer="resumer")
        await first.connect()
        pulled = await pull_records(first, 2)
        assert pulled[1].position == {"0": 2}
        await asyncio.to_thread(spu.produce, topic, 0, [b"c", b"d"])
        await first.close()  # nothing acked: the consumer offset is still unset

        again = log(spu_addr, topic=topic, consumer="resumer")
        await again.connect()
        await again.resume(pulled[1].position)  # the runtime found "b"'s events in the channel log
        offsets = [p.offset for p in await pull_records(again, 2)]
        await again.close()
        return offsets

    assert run(body()) == [2, 3]


def test_a_pulls_records_decode_to_one_event_each_with_its_own_log_metadata(
    spu: SpuClient, spu_addr: str, topic: str
) -> None:
    spu.produce(topic, 0, [b'{"n":0}', b"not json", b'{"n":2}'])

    async def body() -> Decoded:
        conn = log(spu_addr, topic=topic)
        await conn.connect()
        item = await conn.pull()
        await conn.close()
        assert item is not None
        return SourceDecoder(conn.ctx, conn.structured).decode(item)

    decoded = run(body())
    got = [(bytes(value), run.meta["log"]["offset"]) for run in decoded.runs for value in run.values]
    assert got == [(b'{"n":0}', 0), (b'{"n":2}', 2)]
    (error,) = decoded.errors  # the bad record is an `err` event with its own `$log`
    assert error.port == "err" and error.meta["log"]["offset"] == 1
