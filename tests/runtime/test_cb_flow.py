"""Tremor's circuit-breaker test flow, as its integration tests write it: cb -> passthrough -> cb."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from contraflow.connectors.cb import CbConnector
from tests.runtime.harness import flow_id, running, wait_for


def test_every_line_of_the_cb_source_is_acked_through_a_pipeline_and_the_runtime_is_asked_to_stop(
    spark, spu_addr, tmp_path: Path
) -> None:
    lines = [{"cb": "ack", "n": i} for i in range(20)] + [{"cb": ["fail"], "n": 20}]
    (tmp_path / "in.json").write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    fid = flow_id("cb")
    # A 200 ms trigger: with the default one, stopping the query at the end ran into its 9 s ceiling.
    source = f"""
define flow {fid}
args
  pipelines = {{"main": {{"trigger_ms": 200}}}}
flow
  use tremor::pipelines;
  use std::time::nanos;
  define connector cb from cb
  with
    codec = "json",
    config = {{"paths": ["{tmp_path / "in.json"}"], "timeout": nanos::from_seconds(30)}}
  end;
  create connector cb;
  create pipeline main from pipelines::passthrough;
  connect /connector/cb/out to /pipeline/main/in;
  connect /pipeline/main/out to /connector/cb/in;
end;
deploy flow {fid};
"""

    async def scenario() -> CbConnector:
        async with running(spu_addr, spark, tmp_path / "data", source) as runtime:
            await asyncio.wait_for(runtime.stop_requested.wait(), 60)
            conn = runtime.flows[fid].connectors["cb"].connector
            assert isinstance(conn, CbConnector)
            await wait_for(lambda: conn.ctx.metrics.errors == 1, what="the failed event")
            return conn

    conn = asyncio.run(scenario())
    assert conn.status() == {"sent": 21, "acked": 21, "failed": 0}  # a failed event is handled too
