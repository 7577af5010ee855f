"""The bridge on a real Spark standalone cluster: a master and two workers on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from contraflow.spark.standalone import StandaloneCluster
from tests.cli_process import child_env
from tests.spark.test_bridge import read_all

WORKER = Path(__file__).with_name("cluster_worker.py")


def test_passthrough_runs_on_a_standalone_master_with_two_workers(
    spu, spu_addr, topic_name, tmp_path: Path
) -> None:
    src, dst = topic_name + "-in", topic_name + "-out"
    spu.create_topic(src)
    spu.create_topic(dst)
    sent = [b"event-%03d" % i for i in range(200)]
    spu.produce(src, 0, sent)
    env = child_env()
    with StandaloneCluster(tmp_path / "cluster", workers=2) as cluster:
        assert cluster.alive_workers() == 2
        run = subprocess.run(
            [
                sys.executable,
                str(WORKER),
                cluster.master_url,
                spu_addr,
                src,
                dst,
                str(tmp_path / "ck"),
                str(tmp_path / "data"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "executors 2" in run.stdout
    assert sorted(read_all(spu, dst)) == [v.upper() for v in sent]
