"""`contraflow run FLOW --spu A,B,C` on a 3-SPU cluster with local Spark, all on 127.0.0.1.
Mid-stream the SPU leading the flow's output is SIGKILLed and restarted: every event and
every window of the stateful pipeline comes out once (the counts carried on). The stateful
pipeline's group key comes from a `python::batch` whose module sits next to the flow file. The
checks run after SIGTERM: it drains the flow, so anything written twice is in the topics by then.
The same flow on a Spark standalone master and two workers is in tests/spark/test_cluster.py,
which shares its Spark cluster with the bridge's test there."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from tests.e2e.run_process import RunProcess
from tests.spu.cluster_harness import local_cluster, partition_state, wait_for
from tests.spu.flow_harness import (
    assert_exactly_once,
    create_topics,
    everything_out,
    feed_mid_stream,
    warm_up,
    write_flow,
)

from contraflow.spu.client import SpuClient

EVENTS = 1000  # 25 windows a group; the last HELD events are fed after the kills


@pytest.mark.timeout(600)  # a Spark start and an SPU cluster on a loaded 2-core box
def test_a_flow_survives_the_sigkill_of_its_outputs_leader(tmp_path: Path) -> None:
    with local_cluster(tmp_path / "cluster") as cluster, SpuClient(cluster.bootstrap) as client:
        create_topics(client)
        run = RunProcess(
            write_flow(tmp_path),
            tmp_path / "data",
            tmp_path,
            tmp_path / "run.log",
            "--spu",
            cluster.bootstrap,
        )
        try:
            run.wait_until(run.running, 240, "the flow to start")
            warm_up(cluster.bootstrap, run, client)
            feeder = feed_mid_stream(cluster.bootstrap, run, client, EVENTS)
            leader = partition_state(cluster, "passed")[0]
            cluster.signal(f"spu-{leader}", signal.SIGKILL)
            time.sleep(2)
            cluster.start_spu(leader)
            feeder.finish(120)
            run.wait_until(lambda: everything_out(client, EVENTS), 300, "every event and window")
            assert run.terminate() == 0, run.tail()
        finally:
            run.kill()
        assert_exactly_once(client, EVENTS)
        wait_for("the restarted SPU back in sync", lambda: leader in partition_state(cluster, "passed")[3])
