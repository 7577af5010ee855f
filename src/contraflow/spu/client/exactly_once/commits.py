"""A client's exactly-once commits, aborts and ledger questions: one path for one SPU or many.

The client sees a lone SPU as the cluster of one that leads every partition
(`routing.LoneRoutes`), so each operation is written once:
- `commit` groups the batch's partitions by leader and sends each leader one
  TXN_COMMIT naming its partitions and their batch counts, in parallel. A lone
  SPU, which leads them all, gets them in one request and commits them
  atomically; a cluster SPU commits each of its partitions (docs/spu-cluster.md,
  "Exactly-once commits"). Partitions whose leader moved are sent again to the
  new one until every partition is committed (commits are idempotent).
- `ledger` asks the SPUs that answer for the wanted partitions and retries until
  every partition the metadata names was answered for.
- `abort` drops the batch's staging on every SPU (best effort: staging expires).
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


async def commit(
    client: AsyncSpuClient, producer_id: str, batch_id: int, partitions: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Commit every partition of the batch at its leader; the end offset of each."""
    pending = dict(partitions)
    ends: dict[TopicPartition, int] = {}
    deadline = time.monotonic() + client.failover_timeout_s
    while True:
        groups = (await client.routes()).by_leader(pending)
        asked = [(addr, {tp: pending[tp] for tp in tps}) for addr, tps in groups.items()]
        answers = await asyncio.gather(
            *(_commit_at(client, addr, producer_id, batch_id, part) for addr, part in asked),
            return_exceptions=True,
        )
        for (_, part), answer in zip(asked, answers, strict=True):
            if isinstance(answer, BaseException):
                _raise_unless_rerouted(answer)
                continue
            ends.update(answer)
            for tp in part:
                pending.pop(tp, None)
        if not pending:
            return ends
        await _before_retry(client, deadline, pending, "commit")


async def commit_staged(
    client: AsyncSpuClient, producer_id: str, batch_id: int, expected_batches: int | None
) -> dict[TopicPartition, int]:
    """Commit whatever the home SPU staged for the batch, naming no partition (what a lone SPU
    can do; a cluster SPU refuses: it commits partition by partition)."""
    fields = {"producer_id": producer_id, "batch_id": batch_id, "expected_batches": expected_batches}
    return _ends((await client.request(ApiKey.TXN_COMMIT, fields)).fields)


async def _commit_at(
    client: AsyncSpuClient, addr: str, producer_id: str, batch_id: int, part: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    fields = {
        "producer_id": producer_id,
        "batch_id": batch_id,
        "expected_batches": sum(part.values()),
        "partitions": [[t, p, n] for (t, p), n in sorted(part.items())],
    }
    return _ends(await _ask(client, addr, ApiKey.TXN_COMMIT, fields))


async def ledger(
    client: AsyncSpuClient, producer_id: str, batch_id: int, topics: Iterable[str] | None = None
) -> dict[TopicPartition, int] | None:
    """The batch's end offsets in every partition (of `topics`, default all) where it is
    committed, None if nowhere."""
    named = None if topics is None else set(topics)
    deadline = time.monotonic() + client.failover_timeout_s
    fields = {"producer_id": producer_id, "batch_id": batch_id}
    while True:
        routes = await client.routes()
        wanted = routes.partitions(named)
        addrs = list(routes.answering(wanted))
        answers = await asyncio.gather(
            *(_ask(client, a, ApiKey.TXN_LEDGER, fields) for a in addrs), return_exceptions=True
        )
        ends: dict[TopicPartition, int] = {}
        answered: set[TopicPartition] = set()
        everyone = True
        committed = False  # an SPU answers None where it knows no commit of the batch
        for answer in answers:
            if isinstance(answer, BaseException):
                _raise_unless_rerouted(answer)
                everyone = False
                continue
            committed |= answer["end_offsets"] is not None
            ends.update((tp, end) for tp, end in _ends(answer).items() if named is None or tp[0] in named)
            answered.update((str(t), int(p)) for t, p in answer.get("led", ()))
        missing = wanted - answered
        if everyone and not missing:
            # A batch committed with no records has empty ends; asked for topics, it wrote none of them.
            return ends if ends or (committed and named is None) else None
        await _before_retry(client, deadline, missing, "ledger")


async def abort(client: AsyncSpuClient, producer_id: str, batch_id: int) -> bool:
    """Drop the batch's staging on every SPU; True if any had some."""
    fields = {"producer_id": producer_id, "batch_id": batch_id}
    addrs = (await client.routes()).known_addrs()
    results = await asyncio.gather(
        *(_ask(client, a, ApiKey.TXN_ABORT, fields) for a in addrs), return_exceptions=True
    )
    return any(isinstance(r, dict) and r["aborted"] for r in results)


async def _ask(client: AsyncSpuClient, addr: str, api: ApiKey, fields: dict[str, Any]) -> dict[str, Any]:
    conn = await client.connection(addr)
    return (await conn.request(api, fields, (), client.request_timeout_s)).fields


def _ends(fields: dict[str, Any]) -> dict[TopicPartition, int]:
    return {(str(t), int(p)): int(o) for t, p, o in fields["end_offsets"] or ()}


def _raise_unless_rerouted(error: BaseException) -> None:
    """An SPU that could not answer now (down, or no longer the leader) is asked again."""
    if not (isinstance(error, SpuError) and (error.retriable or error.code in REROUTE)):
        raise error


async def _before_retry(
    client: AsyncSpuClient, deadline: float, missing: Iterable[TopicPartition], what: str
) -> None:
    """Wait a little and learn the leaders again, or give up at the failover deadline."""
    if time.monotonic() > deadline:
        names = ", ".join(f"{t}/{p}" for t, p in sorted(missing)) or "an SPU"
        raise SpuError(ErrorCode.NOT_LEADER, f"no leader answered for {names} of the batch {what}")
    await asyncio.sleep(client.retry.initial_s)
    await client.refresh_routes()
