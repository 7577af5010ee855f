"""A flow across hosts (issue 32): `contraflow run FLOW --spu A,B,C` on a node of its own, with
its local Spark there, the controller and the three SPUs each on theirs
(tests/faults/netns.py). Mid-stream the runtime is cut from the leader of the flow's `passed`
channel for a few seconds while the input goes on, then healed: every event comes out in
`passed` once, every window in `counted` once with the right counts (the stateful pipeline's
numbers carried on), and nothing listens beyond a node's address and loopback. The longer
run, on a Spark standalone master and two workers each on a node of its own with a worker
cut too, is benchmarks/flow_partition.py (`make flow-partition`): minutes, not seconds.
"""

from __future__ import annotations

from pathlib import Path

from contraflow.spu.client import SpuClient
from tests.faults.cluster import partitioned_cluster
from tests.faults.flow import RUNTIME, Feed, cut_from_leader, listening_beyond, start_runtime, warm_up_flow
from tests.spu.flow_harness import WARM_UP, assert_exactly_once, create_topics

# 400 events: 100 to warm up, 100 streaming at 100/s before the cut, 200 fed while it lasts
FEED = Feed(events=WARM_UP + 300, before_cut=100, per_second=100)
CUT_S = 3.0  # past TCP's first retransmissions: the runtime's requests to the leader hang
WAIT_S = 120.0  # a Spark start and a first stateful micro-batch on a loaded 2-core box


def test_a_flow_cut_from_a_channels_leader_delivers_every_event_once(tmp_path: Path) -> None:
    with (
        partitioned_cluster(tmp_path / "cluster", extra_nodes=[RUNTIME]) as setting,
        SpuClient(setting.cluster.bootstrap) as client,
    ):
        create_topics(client)
        run = start_runtime(setting, tmp_path, spark=None)
        try:
            run.wait_until(run.running, WAIT_S, "the flow to start")
            warm_up_flow(setting, run, client, WAIT_S)
            cut = cut_from_leader(setting, run, client, FEED, CUT_S, WAIT_S)
            assert cut["fed_while_cut"] > 0, cut  # the input went on while the runtime was cut
            nodes = [n for n in setting.network.nodes]
            assert listening_beyond(setting.network, nodes) == []
            assert run.terminate() == 0, run.tail()
        finally:
            run.kill()
        assert_exactly_once(client, FEED.events)
