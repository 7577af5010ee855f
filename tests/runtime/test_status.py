"""The live status line as a person reads it: a finished source, each sink's total, idle, connecting.

A real runtime on the session's SPU and Spark runs file -> pass -> two files; the board renders
it like `contraflow run` does.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from contraflow.runtime.hold import Breaker, BreakerCause
from contraflow.runtime.sink import NOT_CONNECTED
from contraflow.runtime.status import StatusBoard
from tests.runtime.harness import flow_id, read_events, running, troy, wait_for, write_events


def test_finished_source_sink_totals_and_idle(spark: object, spu_addr: str, tmp_path: Path) -> None:
    fid = flow_id("status")
    write_events(tmp_path / "in.jsonl", 25)
    source = troy(
        fid,
        f"""
  create connector input from lines with path = "{tmp_path}/in.jsonl" end;
  create connector copy from lines with path = "{tmp_path}/copy.jsonl", mode = "truncate" end;
  create connector again from lines with path = "{tmp_path}/again.jsonl", mode = "truncate" end;
  create pipeline pass;
  connect /connector/input to /pipeline/pass;
  connect /pipeline/pass to /connector/copy;
  connect /pipeline/pass to /connector/again;
""",
    )

    async def scenario() -> tuple[str, str, str]:
        board = StatusBoard()
        async with running(spu_addr, spark, tmp_path / "data", source) as runtime:
            flow = runtime.flows[fid]
            await wait_for(lambda: len(read_events(tmp_path / "again.jsonl")) == 25, 120, "delivery")
            await wait_for(lambda: flow.connectors["input"].source.exhausted, what="the end of the file")
            assert flow.monitor is not None
            monitor = flow.monitor
            await wait_for(lambda: all(s.depth == 0 for s in monitor.states.values()), 60, "empty channels")
            moving = board.render([flow]).plain
            await asyncio.sleep(0.2)
            still = board.render([flow]).plain
            flow.holds.open[Breaker("copy", BreakerCause.CONNECTION)] = NOT_CONNECTED
            flow.holds.open[Breaker("again", BreakerCause.CAPACITY)] = "4 requests in flight"
            connecting = board.render([flow]).plain
            flow.holds.open[Breaker("copy", BreakerCause.CONNECTION)] = "connection lost: refused"
            lost = board.render([flow]).plain
            flow.holds.open.clear()
        return moving, still, connecting, lost

    moving, still, connecting, lost = asyncio.run(scenario())
    assert moving.startswith(f"{fid}  running  in 0/s  out 0/s  depth 0"), moving
    assert "input 25 finished → copy 25 · again 25" in moving and "breaker closed" in moving
    assert still.startswith(f"{fid}  idle  depth 0  input 25 finished"), still
    assert "connecting: copy  busy: again 4 requests in flight" in connecting, connecting
    assert "breaker OPEN" not in connecting, connecting
    assert "breaker OPEN: copy connection lost: refused  busy: again" in lost, lost
