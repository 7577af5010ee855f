"""Control values through a real SPU: one name and one shape for writer and reader, sync or async."""

from __future__ import annotations

import asyncio

from contraflow import control
from contraflow.spu.client import AsyncSpuClient, SpuClient


def test_credit_round_trips_and_is_never_negative(spu: SpuClient) -> None:
    credit = control.credit("flow.pipe.in", "flow.src.out")
    assert credit.name == "credit/flow.pipe.in/flow.src.out"
    assert credit.get(spu) is None, "no credit published means no limit"
    credit.set(spu, 120)
    assert credit.get(spu) == 120
    credit.set(spu, -5)
    assert credit.get(spu) == 0, "a negative room is a stop, not a negative limit"
    credit.set(spu, None)
    assert credit.get(spu) is None


def test_async_writer_and_sync_reader_agree(spu_addr: str, spu: SpuClient) -> None:
    signals = control.signals("flow.guard")
    published = {"slow": {"backoff_until_ns": 7}, "share": {"perc": 0.5}}

    async def publish() -> dict[str, dict[str, object]]:
        client = AsyncSpuClient(spu_addr)
        try:
            await signals.set_async(client, published)
            return await signals.get_async(client)
        finally:
            await client.close()

    assert asyncio.run(publish()) == published
    assert signals.get(spu) == published
    signals.set(spu, {"rr": {"unavailable": ["b"]}})
    assert signals.get(spu) == {"rr": {"unavailable": ["b"]}}, "signals are replaced as a whole"


def test_signals_of_a_pipeline_never_published_are_empty(spu: SpuClient) -> None:
    assert control.signals("flow.never-published").get(spu) == {}
