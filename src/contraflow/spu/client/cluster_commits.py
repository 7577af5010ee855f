"""A client's exactly-once commits and ledger questions against an SPU cluster.

A cluster commits a batch partition by partition, each at its leader
(docs/spu-cluster.md, "Exactly-once commits"): `commit` sends one TXN_COMMIT
per partition the batch staged to, in parallel, each following its leader
through a failover like a produce, and fails if any of them fails (a retry, or
Spark's replay of the batch, then writes only the partitions still missing).
Each SPU answers ledger questions for the partitions it leads, so `ledger` asks
every leader and retries until every partition of the cluster was answered for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from contraflow.spu.protocol import ApiKey, ErrorCode, SpuError
from contraflow.spu.protocol.errors import REROUTE
from contraflow.spu.protocol.topics import TopicPartition

if TYPE_CHECKING:
    from contraflow.spu.client.aio import AsyncSpuClient


async def commit_partitions(
    client: AsyncSpuClient, producer_id: str, batch_id: int, partitions: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Commit every partition of the batch at its leader; the end offset of each."""

    async def one(tp: TopicPartition, batches: int) -> dict[TopicPartition, int]:
        fields = {
            "producer_id": producer_id,
            "batch_id": batch_id,
            "expected_batches": batches,
            "topic": tp[0],
            "partition": tp[1],
        }
        answer = await client.request(ApiKey.TXN_COMMIT, fields)
        return {(str(t), int(p)): int(o) for t, p, o in answer.fields["end_offsets"]}

    results = await asyncio.gather(*(one(tp, n) for tp, n in partitions.items()), return_exceptions=True)
    ends: dict[TopicPartition, int] = {}
    for result in results:
        if isinstance(result, BaseException):
            raise result
        ends.update(result)
    return ends


async def cluster_ledger(
    client: AsyncSpuClient, producer_id: str, batch_id: int, topics: Iterable[str] | None = None
) -> dict[TopicPartition, int] | None:
    """The batch's end offsets in every partition (of `topics`, default all) where it is
    committed, None if nowhere."""
    deadline = time.monotonic() + client.failover_timeout_s
    fields = {"producer_id": producer_id, "batch_id": batch_id}
    while True:
        routes = await client.routes()
        named = routes.metadata.topics if topics is None else set(topics)
        wanted = {
            (name, n)
            for name, record in routes.metadata.topics.items()
            if name in named
            for n in range(len(record.partitions))
        }
        addrs = {a for a in (routes.leader_addr(*tp) for tp in wanted) if a is not None}
        answers = await asyncio.gather(*(_ask(client, a, fields) for a in addrs), return_exceptions=True)
        ends: dict[TopicPartition, int] = {}
        answered: set[TopicPartition] = set()
        for answer in answers:
            if isinstance(answer, tuple):
                ends.update((tp, end) for tp, end in answer[0].items() if tp in wanted)
                answered.update(answer[1])
            elif not (isinstance(answer, SpuError) and (answer.retriable or answer.code in REROUTE)):
                raise answer
        if wanted <= answered:
            return ends or None
        if time.monotonic() > deadline:
            missing = ", ".join(f"{t}/{p}" for t, p in sorted(wanted - answered))
            raise SpuError(ErrorCode.NOT_LEADER, f"no leader answered for {missing} of the batch ledger")
        await asyncio.sleep(client.retry.initial_s)
        await client.refresh_routes()


async def _ask(
    client: AsyncSpuClient, addr: str, fields: dict[str, Any]
) -> tuple[dict[TopicPartition, int], set[TopicPartition]]:
    conn = await client.connection(addr)
    answer = (await conn.request(ApiKey.TXN_LEDGER, fields, (), client.request_timeout_s)).fields
    ends = {(str(t), int(p)): int(o) for t, p, o in answer["end_offsets"] or ()}
    return ends, {(str(t), int(p)) for t, p in answer.get("led", ())}


async def abort_everywhere(client: AsyncSpuClient, producer_id: str, batch_id: int) -> bool:
    """Drop the batch's staging on every SPU (best effort: staging also expires)."""
    fields = {"producer_id": producer_id, "batch_id": batch_id}
    addrs = (await client.routes()).known_addrs()

    async def one(addr: str) -> bool:
        conn = await client.connection(addr)
        return bool(
            (await conn.request(ApiKey.TXN_ABORT, fields, (), client.request_timeout_s)).fields["aborted"]
        )

    results = await asyncio.gather(*(one(a) for a in addrs), return_exceptions=True)
    return any(r is True for r in results)
