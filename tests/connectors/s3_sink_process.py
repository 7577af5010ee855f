"""A child process running the real sink pump (`SinkRunner`) of an `s3_streamer` over one channel topic.

`python -m tests.connectors.s3_sink_process SPU_ADDR TOPIC S3_URL BUCKET MODE`: MODE `hold`
runs until killed; `finish` (also run in the test's own process, as `main`) runs until every
record of the topic was handed to the sink, then stops as a flow does (the sink settles: its
object is completed).
"""

from __future__ import annotations

import asyncio
import sys

from contraflow.connectors.base import connector_class
from contraflow.runtime.sink import SinkRunner
from contraflow.spu.client import AsyncSpuClient
from tests.connectors.support import make
from tests.runtime.sink_support import Breaker
from tests.runtime.sink_support import sink_runner as tailing

CONSUMER = "s3-sink"


def sink_runner(
    client: AsyncSpuClient, topic: str, s3_url: str, bucket: str, breaker: Breaker = lambda _open, _why: None
) -> SinkRunner:
    """The runtime's sink pump of a consistent `s3_streamer` tailing `topic`; `breaker(open, why)` hears
    its circuit breaker."""
    streamer = make("s3_streamer", {"url": s3_url, "bucket": bucket, "mode": "consistent"}, codec="string")
    assert connector_class("s3_streamer").holds_deliveries
    return tailing(streamer, client, topic, CONSUMER, breaker)


async def main(spu_addr: str, topic: str, s3_url: str, bucket: str, mode: str) -> None:
    client = AsyncSpuClient(spu_addr)
    runner = sink_runner(client, topic, s3_url, bucket)
    assert await runner.connect()
    running = asyncio.create_task(runner.run())
    end = await client.list_offsets(topic, 0, "latest")
    while mode == "finish" and not (runner.hold is not None and runner.hold.taken_of(topic) >= end):
        await asyncio.sleep(0.01)
    if mode == "hold":
        await running  # until killed
    runner.stop.set()
    await running
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
