"""A request to a dead SPU that is cancelled ends cancelled, whenever the cancel lands.

A follower of a SIGKILLed leader retries connecting to its closed port; when the SPU
stops following (it leads now), it cancels that loop and waits for it to end. Python 3.11's
`asyncio.wait_for` returned the refused connection instead of the cancellation when both
landed in the same turn of the event loop, so the loop went on retrying, the stop never
returned, and the SPU's metadata apply (and its heartbeats with it) hung for good.
"""

from __future__ import annotations

import asyncio
import socket

from contraflow.spu.client.aio import AsyncSpuClient
from contraflow.spu.protocol import ApiKey, SpuError
from contraflow.spu.rpc.client import RetryPolicy

STEPS = 40  # turns of the event loop before the cancel: past the refused connect's few


def closed_port() -> int:
    """A loopback port nothing listens on (as a SIGKILLed SPU's)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def retry_until_cancelled(client: AsyncSpuClient, given_up: asyncio.Event) -> None:
    """What a follower does while its leader is gone: ask again, and again (`given_up`
    only lets the test end when a cancel was lost)."""
    while not given_up.is_set():
        try:
            await client.request(ApiKey.API_VERSIONS, {})
        except SpuError:
            await asyncio.sleep(0)


async def outcomes(addr: str) -> list[str]:
    """For each number of loop turns before the cancel: how the retrying task ended."""
    ended = []
    for steps in range(STEPS):
        client = AsyncSpuClient(addr, connect_timeout_s=1.0, retry=RetryPolicy(attempts=1))
        given_up = asyncio.Event()
        task = asyncio.create_task(retry_until_cancelled(client, given_up))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=1.0)
        ended.append("cancelled" if done and task.cancelled() else f"still running after {steps} turns")
        given_up.set()
        await asyncio.wait([task])
        await client.close()
    return ended


def test_a_retry_loop_against_a_dead_spu_ends_when_cancelled_at_any_moment() -> None:
    ended = asyncio.run(outcomes(f"127.0.0.1:{closed_port()}"))
    assert [e for e in ended if e != "cancelled"] == []
