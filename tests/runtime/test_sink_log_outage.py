"""A sink's tail outlives its log being out of reach longer than the client's own retries: an SPU
that leads the channel dies (SIGKILL, a partition) and a cluster takes a session timeout or more to
elect another leader; the sink reads again from where it delivered, and nothing comes twice."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from contraflow.runtime.connection import SharedConnect
from contraflow.runtime.gate import Gate
from contraflow.runtime.metrics import RuntimeMetrics
from contraflow.runtime.settings import DeliverySettings
from contraflow.runtime.sink import SinkRunner
from contraflow.spu.client import AsyncProducer, AsyncSpuClient
from contraflow.spu.protocol.topics import TopicConfig
from tests.connectors.support import make
from tests.runtime.harness import free_port
from tests.spu.spu_harness import running_spu

TOPIC = "channel"


def file_sink_runner(
    client: AsyncSpuClient, out: Path, topic: str = TOPIC, postprocessors: list[Any] | None = None
) -> SinkRunner:
    """A file sink appending the topic's records, as the runtime runs one."""
    sink = make("file", {"path": str(out), "mode": "append"}, postprocessors=postprocessors or ["separate"])
    return SinkRunner(
        sink,
        [(topic, "file-sink", "in")],
        client,
        AsyncProducer(client),
        None,
        Gate(),
        DeliverySettings(),
        RuntimeMetrics(),
        lambda _open, _why: None,
        SharedConnect(sink, lambda _why: None, asyncio.Event()),
    )


def delivered(out: Path) -> list[int]:
    return [json.loads(line)["n"] for line in out.read_text().splitlines()] if out.exists() else []


async def until(condition: object, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_sink_reads_on_after_its_log_was_unreachable_for_longer_than_the_clients_retries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    addr = f"127.0.0.1:{free_port()}"
    out = tmp_path / "out.jsonl"

    async def produce(first: int) -> None:
        client = AsyncSpuClient(addr)
        try:
            for n in range(first, first + 5):
                await client.produce(TOPIC, 0, [json.dumps({"n": n}).encode()])
        finally:
            await client.close()

    async def scenario() -> None:
        with running_spu(tmp_path / "spu", addr=addr):
            client = AsyncSpuClient(addr)
            await client.create_topic(TOPIC, TopicConfig(partitions=1))
            await produce(0)
            runner = file_sink_runner(client, out)
            assert await runner.connect()
            running = asyncio.create_task(runner.run())
            await until(lambda: len(delivered(out)) == 5, "the first records")
        # The SPU is gone: its client gives up after its own retries; the tail must not.
        await until(
            lambda: running.done() or "is unreachable" in caplog.text, "the tail to notice the outage"
        )
        assert not running.done(), f"the sink's tail ended: {running.exception()!r}"
        with running_spu(tmp_path / "spu", addr=addr):
            await produce(5)
            await until(lambda: len(delivered(out)) >= 10, "the records after the outage")
            runner.stop.set()
            await running
            await client.close()

    with caplog.at_level(logging.WARNING, logger="contraflow.runtime.sink"):
        asyncio.run(scenario())
    assert delivered(out) == list(range(10)), "every record once, in order"
