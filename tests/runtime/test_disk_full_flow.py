"""Issue 32: a flow whose SPU disk fills (a 4 MiB tmpfs, `small_disk`). The source's append is
refused with DISK_FULL: its breaker opens with cause `disk_full`, it pulls nothing more; once a
topic is deleted and space is free it appends the very pull it held, the breaker closes, and
the sink gets every event once, in order."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from contraflow.runtime.hold import Breaker, BreakerCause
from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.protocol.errors import ErrorCode, SpuError
from contraflow.spu.protocol.topics import TopicConfig
from tests.runtime.harness import files_through_pass, flow_id, read_events, running, wait_for

SMALL_SEGMENTS = TopicConfig(partitions=1, segment_bytes=256 * 1024)
RECORD = b"." * 1000


def fill(spu: SpuClient, topic: str, limit: int | None = None) -> int:
    """Produce 10 KB batches to `topic` until the disk is full (or `limit` batches); batches written."""
    spu.create_topic(topic, SMALL_SEGMENTS)
    written = 0
    while limit is None or written < limit:
        try:
            spu.produce(topic, 0, [RECORD] * 10)
        except SpuError as err:
            assert err.code is ErrorCode.DISK_FULL, err
            break
        written += 1
    return written


def test_a_source_stops_behind_a_breaker_on_a_full_disk_and_resumes_losing_nothing(
    spark: Any, small_disk: Path, tmp_path: Path
) -> None:
    # 300 events of ~2 KB: 0.6 MB, more than the disk has left for the flow's channels
    sent = [{"n": n, "pad": "." * 2000} for n in range(300)]
    (tmp_path / "in.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in sent))
    out = tmp_path / "out.jsonl"
    fid = flow_id("diskfull")
    source = files_through_pass(
        fid, tmp_path / "in.jsonl", out, args='pipelines = {"pass": {"trigger_ms": 200}}'
    )
    with EmbeddedSpu(small_disk / "spu", mode="thread") as server, SpuClient(server.addr) as spu:
        fill(spu, "room", limit=20)  # ~200 KB, freed for the flow's topics below
        assert fill(spu, "ballast") > 100
        spu.delete_topic("room")

        async def scenario() -> None:
            async with running(server.addr, spark, tmp_path / "data", source) as runtime:
                flow = runtime.flows[fid]
                stopped = Breaker("input", BreakerCause.DISK_FULL)
                await wait_for(lambda: stopped in flow.holds.open, 60, "the source's disk-full breaker")
                assert flow.holds.open[stopped].startswith("disk full: no space left on device: append to")
                opened = [
                    e for e in runtime.events.recent if e["kind"] == "breaker" and e["cause"] == "disk_full"
                ]
                assert [(e["connector"], e["state"]) for e in opened] == [("input", "open")]
                assert len(read_events(out)) < len(sent)
                shown = {c.alias: c for c in (await runtime.get_flow(fid)).connectors}["input"]
                assert shown.breaker == "open" and str(shown.breaker_reason).startswith("disk full: ")

                spu.delete_topic("ballast")
                await wait_for(lambda: len(read_events(out)) >= len(sent), 60, "every event in the sink")
                assert stopped not in flow.holds.open
                closed = [
                    e for e in runtime.events.recent if e["kind"] == "breaker" and e["cause"] == "disk_full"
                ]
                assert [e["state"] for e in closed] == ["open", "closed"]

        asyncio.run(scenario())
    assert read_events(out) == sent
