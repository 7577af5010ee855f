"""A sink's tail outlives its log being out of reach longer than the client's own retries: an SPU
that leads the channel dies (SIGKILL, a partition) and a cluster takes a session timeout or more to
elect another leader; the sink reads again from where it delivered, and nothing comes twice."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import pytest

from contraflow.spu.client import AsyncSpuClient
from contraflow.spu.protocol.topics import TopicConfig
from contraflow.spu.rpc.client import RetryPolicy
from tests.runtime.harness import free_port
from tests.runtime.sink_support import file_sink_runner
from tests.spu.spu_harness import running_spu

TOPIC = "channel"
LONGEST_FIRST_WAIT_S = 0.1  # the tail's first wait for a lost leader, at most (`sink.leader_waits`)


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
            client = AsyncSpuClient(addr, retry=RetryPolicy(attempts=2))  # the outages outlast it soon
            await client.create_topic(TOPIC, TopicConfig(partitions=1))
            await produce(0)
            runner = file_sink_runner(client, out, TOPIC)
            assert await runner.connect()
            running = asyncio.create_task(runner.run())
            await until(lambda: len(delivered(out)) == 5, "the first records")
        # The SPU is gone: its client gives up after its own retries; the tail must not. It waits
        # longer each time it finds the log unreachable (three times here)...
        await until(lambda: running.done() or len(waits()) >= 3, "the tail to notice the outage")
        assert not running.done(), f"the sink's tail ended: {running.exception()!r}"
        with running_spu(tmp_path / "spu", addr=addr):
            await produce(5)
            await until(lambda: len(delivered(out)) >= 10, "the records after the outage")
            first_outage = len(waits())
        # ... and once it read the log again, the next outage starts from the first wait.
        await until(lambda: running.done() or len(waits()) > first_outage, "the second outage")
        with running_spu(tmp_path / "spu", addr=addr):  # its offset commits go through before it stops
            runner.stop.set()
            await running
            await client.close()
        assert max(waits()[:first_outage]) > LONGEST_FIRST_WAIT_S, "the waits grew in the first outage"
        assert waits()[first_outage] <= LONGEST_FIRST_WAIT_S, "the second outage starts anew"

    def waits() -> list[float]:
        """The waits the tail logged before reading again."""
        return [r.args[-1] for r in caplog.records if "is unreachable" in r.msg]  # type: ignore[index]

    with caplog.at_level(logging.WARNING, logger="contraflow.runtime.sink"):
        asyncio.run(scenario())
    assert delivered(out) == list(range(10)), "every record once, in order"
