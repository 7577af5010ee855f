"""The in-process path to an SPU in this process: what a TCP client sees, minus the socket.

The session's SPU (`spu_addr`) runs as a thread of the test process, so
`spu_client` hands out the in-process client for it; a plain `AsyncSpuClient`
on the same address checks every effect over the network.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.client.in_process import InProcessSpuClient, spu_client
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.protocol import Acks, ErrorCode, SpuError
from contraflow.spu.protocol.batch import encode_batch
from contraflow.spu.protocol.topics import TopicConfig


def values_of(results: list) -> list[bytes]:  # type: ignore[type-arg]
    return [r.value for result in results for b in result.batches for r in b.records()]


async def tail(client: AsyncSpuClient, topic: str, offset: int, count: int) -> list[bytes]:
    """The first `count` values of `topic` from `offset`, as a sink's tail reads them."""
    stream = client.stream(topic, 0, offset, max_bytes=1 << 20)
    results = []
    try:
        async for result in stream:
            results.append(result)
            if len(values_of(results)) >= count:
                break
    finally:
        await stream.close()
    return values_of(results)


def parked_reads(client: InProcessSpuClient) -> list[asyncio.Task]:  # type: ignore[type-arg]
    """The tails' reads waiting on the SPU's loop (read from this thread: `all_tasks` retries if
    the loop changes its task set meanwhile)."""
    tasks = asyncio.all_tasks(client.door.loop)
    return [t for t in tasks if t.get_coro().__qualname__.endswith("next_push")]  # type: ignore[union-attr]


def test_appends_tails_and_commits_are_those_a_tcp_client_sees(spu_addr: str) -> None:
    async def main() -> None:
        local = spu_client(spu_addr)
        assert isinstance(local, InProcessSpuClient)
        async with local, AsyncSpuClient(spu_addr) as remote:
            await remote.create_topic("in-process", TopicConfig(partitions=1))
            first = [f"a{i}".encode() for i in range(3)]
            # Appends called together land in the order they were called, as on one connection.
            ends = await asyncio.gather(
                *(local.produce_encoded("in-process", 0, encode_batch([v]), Acks.COMMITTED) for v in first)
            )
            assert ends == [(0, 0), (1, 1), (2, 2)]
            assert values_of([await remote.fetch("in-process", 0, 0)]) == first
            # A tail waiting at the end wakes for an append made over the network.
            waiting = asyncio.create_task(tail(local, "in-process", 3, 2))
            await asyncio.sleep(0)
            await remote.produce("in-process", 0, [b"b0", b"b1"], acks=Acks.COMMITTED)
            assert await waiting == [b"b0", b"b1"]
            assert await tail(local, "in-process", 1, 4) == [b"a1", b"a2", b"b0", b"b1"]
            await local.commit_offset("group", "in-process", 0, 5)
            assert await remote.fetch_offset("group", "in-process", 0) == 5

    asyncio.run(main())


def test_errors_are_the_network_paths(spu_addr: str) -> None:
    async def main() -> None:
        async with spu_client(spu_addr) as local, AsyncSpuClient(spu_addr) as remote:
            codes = []
            for client in (local, remote):
                with pytest.raises(SpuError) as produce:
                    await client.produce_encoded("no-such-topic", 0, encode_batch([b"x"]), Acks.LEADER)
                with pytest.raises(SpuError) as stream:
                    await tail(client, "no-such-topic", 0, 1)
                codes.append((produce.value.code, stream.value.code))
            assert codes[0] == codes[1] == (ErrorCode.UNKNOWN_TOPIC, ErrorCode.UNKNOWN_TOPIC)

    asyncio.run(main())


def test_a_tail_waiting_when_the_spu_stops_ends_as_a_lost_connection(tmp_path: Path) -> None:
    spu = EmbeddedSpu(tmp_path / "spu", mode="thread")
    addr = spu.start()

    async def main() -> None:
        client = spu_client(addr)
        assert isinstance(client, InProcessSpuClient)
        await client.create_topic("t", TopicConfig(partitions=1))
        waiting = asyncio.create_task(tail(client, "t", 0, 1))
        while not parked_reads(client):  # the stop must end a read waiting on the SPU's loop
            await asyncio.sleep(0.001)
        await asyncio.to_thread(spu.stop)
        with pytest.raises(SpuError) as stopped:
            await waiting
        assert stopped.value.code is ErrorCode.CONNECTION_ERROR
        await client.close()
        # A stopped SPU's door is closed: a new client takes the network path (and finds nobody).
        assert type(spu_client(addr)) is AsyncSpuClient

    asyncio.run(main())
