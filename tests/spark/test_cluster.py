"""Spark standalone clusters on 127.0.0.1: one master and two workers, shared by the module's tests.

First the bridge alone: a passthrough query run by a driver of its own. Then `contraflow run
FLOW --spu A,B,C --master` (outgrowing one machine, end to end): a flow on the same Spark
cluster and a 3-SPU cluster survives losing an SPU (its output's leader, SIGKILLed and
restarted) and a worker with its executor (SIGKILLed), every event and every window of the
stateful pipeline coming out once. Its pipeline's group key comes from a `python::batch`
whose module sits next to the flow file, so on the standalone master it must run from the zip
the runtime ships to the executors. The flow with local Spark, on a node of its own cut from
its output's leader and then losing it to a SIGKILL, is the last test of
tests/faults/test_partitions.py (the harness: tests/spu/flow_harness.py).

The Spark cluster starts once (a master and two worker JVMs: seconds on a loaded 2-core box);
each test's application ends before the next starts, so the next gets both workers again. The
test that kills a worker comes last.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contraflow.spark.standalone import StandaloneCluster
from contraflow.spu.client import SpuClient
from tests.cli_process import child_env
from tests.e2e.run_process import RunProcess
from tests.spark.test_bridge import read_all
from tests.spu.cluster_harness import local_cluster, partition_state
from tests.spu.flow_harness import (
    assert_exactly_once,
    create_topics,
    everything_out,
    feed_mid_stream,
    warm_up,
    write_flow,
)

WORKER = Path(__file__).with_name("cluster_worker.py")
EVENTS = 1000  # 25 windows a group; the last HELD events are fed after the kills


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("standalone"), workers=2) as cluster:
        yield cluster


def test_passthrough_runs_on_a_standalone_master_with_two_workers(
    standalone: StandaloneCluster, spu, spu_addr, topic_name, tmp_path: Path
) -> None:
    src, dst = topic_name + "-in", topic_name + "-out"
    spu.create_topic(src)
    spu.create_topic(dst)
    sent = [b"event-%03d" % i for i in range(200)]
    spu.produce(src, 0, sent)
    assert standalone.alive_workers() == 2
    run = subprocess.run(
        [
            sys.executable,
            str(WORKER),
            standalone.master_url,
            spu_addr,
            src,
            dst,
            str(tmp_path / "ck"),
            str(tmp_path / "data"),
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "executors 2" in run.stdout
    assert sorted(read_all(spu, dst)) == [v.upper() for v in sent]


@pytest.mark.timeout(600)  # Spark on a master and two workers, and an SPU cluster, on a loaded 2-core box
def test_a_flow_on_a_standalone_master_and_an_spu_cluster_survives_losing_an_spu_and_a_worker(
    standalone: StandaloneCluster, tmp_path: Path
) -> None:
    with local_cluster(tmp_path / "spus") as spus, SpuClient(spus.bootstrap) as client:
        create_topics(client)
        args = ("--spu", spus.bootstrap, "--master", standalone.master_url)
        flow = write_flow(tmp_path, shipped=True)  # its Python module must reach the executors in a zip
        run = RunProcess(flow, tmp_path / "data", tmp_path, tmp_path / "run.log", *args)
        try:
            run.wait_until(run.running, 300, "the flow to start")
            warm_up(spus.bootstrap, run, client)
            feeder = feed_mid_stream(spus.bootstrap, run, client, EVENTS)
            assert standalone.busy_workers() == 2, "the pipelines run on both workers"
            leader = partition_state(spus, "passed")[0]
            spus.signal(f"spu-{leader}", signal.SIGKILL)
            standalone.kill_worker(0)  # the module's last test: the cluster keeps one worker
            time.sleep(2)
            spus.start_spu(leader)
            feeder.finish(120)
            run.wait_until(lambda: everything_out(client, EVENTS), 300, "every event and window")
            assert standalone.busy_workers() == 1, "the surviving worker carried on"
            assert run.terminate() == 0, run.tail()
        finally:
            run.kill()
        assert_exactly_once(client, EVENTS)
