"""A flow speaking Tremor's metric formats end to end: statsd lines in, a Trickle select, influx lines out."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.runtime.harness import flow_id, running, wait_for

STATSD_TO_INFLUX = """
define flow {fid}
flow
  define connector metrics from file
  args path, mode = "read", codec = "statsd", post = []
  with codec = args.codec, preprocessors = ["separate"], postprocessors = args.post,
    config = {{"path": args.path, "mode": args.mode}}
  end;
  define pipeline to_influx
  pipeline
    select {{"measurement": event.metric, "tags": {{"type": event.type}},
             "fields": {{"value": event.value}}, "timestamp": 1465839830100400200}}
    from in into out;
  end;
  create connector input from metrics with path = "{source}" end;
  create connector output from metrics
    with path = "{sink}", mode = "truncate", codec = "influx", post = ["separate"] end;
  create pipeline to_influx;
  connect /connector/input to /pipeline/to_influx;
  connect /pipeline/to_influx to /connector/output;
end;
deploy flow {fid};
"""


def test_statsd_lines_come_out_as_influx_lines(spark, spu_addr, tmp_path: Path) -> None:
    source, sink = tmp_path / "in.statsd", tmp_path / "out.influx"
    source.write_bytes(b"gorets:1|c\nglork:320|ms\nnot a metric\nhorst:42.23|h\n")
    fid = flow_id("formats")
    troy = STATSD_TO_INFLUX.format(fid=fid, source=source, sink=sink)

    def lines() -> list[bytes]:
        return sink.read_bytes().splitlines() if sink.exists() else []

    async def scenario() -> None:
        async with running(spu_addr, spark, tmp_path / "data", troy):
            await wait_for(lambda: len(lines()) >= 3, what="three influx lines")

    asyncio.run(scenario())
    assert lines() == [
        b"gorets,type=c value=1i 1465839830100400200",
        b"glork,type=ms value=320i 1465839830100400200",
        b"horst,type=h value=42.23 1465839830100400200",
    ]
