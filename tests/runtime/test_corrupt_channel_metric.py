"""Issue 17: a corrupt batch in a channel's topic is counted in the flow's
`contraflow_channel_corrupt_batches` gauge, observed by the flow monitor from a
real `contraflow spu run` process serving a log damaged on disk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from contraflow.lang.troy.compiler import compile_source
from contraflow.runtime.event_stream import EventStream
from contraflow.runtime.metrics import RuntimeMetrics
from contraflow.runtime.monitor import FlowMonitor
from contraflow.runtime.settings import FlowSettings
from contraflow.runtime.topology import Topology
from contraflow.spu.client import AsyncSpuClient, SpuClient
from contraflow.spu.protocol.errors import SpuError
from contraflow.spu.storage.store import Store
from tests.spu.spu_harness import spu_process
from tests.spu.storage.test_storage_damage import batch_spans, flip

# one channel, read by a connector (the monitor follows no pipeline run: no Spark needed)
FLOW = """
define flow m
flow
  define connector writer from file with config = {"path": "out", "mode": "append"} end;
  define pipeline p pipeline select event from in into out; end;
  create pipeline p;
  create connector snk from writer;
  connect /pipeline/p to /connector/snk;
end;
deploy flow m;
"""


def monitor_of(addr: str, metrics: RuntimeMetrics) -> tuple[FlowMonitor, str]:
    graph = compile_source(FLOW, "<test>", Path.cwd()).flows["m"]
    topology = Topology.of("m", graph)
    [channel] = topology.channels.values()
    settings = FlowSettings.from_args("m", graph.args, {channel.name})
    client = AsyncSpuClient(addr)
    monitor = FlowMonitor("m", topology, settings, client, {}, lambda *_: None, metrics, EventStream(None))
    return monitor, channel.topic


def corrupt_batches(metrics: RuntimeMetrics) -> float | None:
    return metrics.registry.get_sample_value(
        "contraflow_channel_corrupt_batches", {"flow": "m", "channel": "p/out"}
    )


def test_a_corrupt_batch_in_a_channel_shows_in_its_gauge(tmp_path: Path) -> None:
    metrics = RuntimeMetrics()
    topic = monitor_of("127.0.0.1:1", metrics)[1]
    with Store(tmp_path) as store:  # the channel as an earlier run of the flow left it
        store.create_topic(topic)
        part = store.partition(topic, 0)
        for start in range(0, 500, 50):
            part.append_records([b'{"n": %d}' % i for i in range(start, start + 50)])
    log_file = tmp_path / "topics" / topic / "0" / f"{0:020d}.log"
    victim_pos, victim = batch_spans(log_file)[4]
    flip(log_file, victim_pos + victim.total_size // 2)

    async def observe(addr: str) -> None:
        monitor, _ = monitor_of(addr, metrics)
        try:
            await monitor.tick()
        finally:
            await monitor.client.close()

    # no background scrub: here the snk connector's own read must find the bad batch
    with spu_process(tmp_path, "--no-scrub") as (_, addr):
        asyncio.run(observe(addr))
        assert corrupt_batches(metrics) == 0, "nothing read the bad batch yet"
        with SpuClient(addr) as reader, pytest.raises(SpuError, match=f"offset {victim.base_offset}"):
            offset = 0  # read the channel as the snk connector would
            while (result := reader.fetch(topic, 0, offset)).batches:
                offset = result.next_offset
        asyncio.run(observe(addr))
        assert corrupt_batches(metrics) == 1
