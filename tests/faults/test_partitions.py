"""Network partitions of an SPU cluster (issue 32): the controller and three SPUs each on a host of
their own (network namespaces, tests/faults/netns.py), clients on two more; links are cut
(or made lossy or slow) while the processes stay alive, then healed. Each scenario keeps a
history of every produce (acks=all) with its answer and every committed read, and `check`
holds it against the replicas' logs once healed. One cluster serves the module's scenarios,
a topic each; the last runs a flow on one more node (`runtime`) against it, cut from its
output's leader and then losing it to a SIGKILL.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from contraflow.spark.commit_retry import Refusal, commit_retrying
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol import SpuError
from contraflow.spu.protocol.batch import encode_batch
from contraflow.spu.protocol.topics import TopicConfig
from tests.faults.cluster import NODES, SESSION_S, WAIT_S, Scenario, Setting, partitioned_cluster
from tests.faults.flow import (
    RUNTIME,
    Feed,
    cut_from_leader,
    kill_leader_mid_stream,
    listening_beyond,
    start_runtime,
)
from tests.faults.history import acknowledged_nothing, stops_acknowledging
from tests.spu.cluster_harness import partition_state, replica_log, wait_for
from tests.spu.flow_harness import WARM_UP, assert_exactly_once, create_topics, warm_up


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setting]:
    with partitioned_cluster(tmp_path_factory.mktemp("partitions"), extra_nodes=[RUNTIME]) as found:
        yield found


def test_isolated_leader_stops_acknowledging_and_rejoins(setting: Setting) -> None:
    """Scenario 1: the leader and a client next to it are cut off from the controller, the
    followers and the other clients, and the client keeps producing to it. The old leader
    acknowledges nothing once its session timeout has passed, the majority elects a leader
    and takes writes, and once healed the old leader cuts what it alone took and the client
    resumes."""
    run = Scenario(setting, "isolated-leader", producers=["client", "near"], readers=["client", "near"])
    began = time.monotonic()
    run.wait_acks("client", began)
    run.wait_acks("near", began)
    old_leader, old_epoch, _, _ = run.state()
    minority = [f"spu-{old_leader}", "near"]
    setting.network.split(minority, [n for n in NODES if n not in minority])
    cut_at = time.monotonic()

    wait_for("a new leader", lambda: run.state()[0] not in (-1, old_leader), WAIT_S)
    assert run.state()[1] > old_epoch
    run.wait_acks("client", time.monotonic())
    wait_for("two sessions since the cut", lambda: time.monotonic() > cut_at + 2.5 * SESSION_S, WAIT_S)
    setting.network.heal()
    healed_at = time.monotonic()
    assert stops_acknowledging(run.producers["near"], cut_at, healed_at, SESSION_S) == []
    run.wait_acks("near", healed_at)  # the client finds the new leader by itself
    run.wait_in_sync()
    assert run.finish() == []


def test_follower_isolated_then_healed_while_the_leader_moves(setting: Setting) -> None:
    """Scenario 3 (a minority partition): one follower is cut off from everything; the leader
    goes on with the other follower. The link is healed and at once the leader is SIGKILLed,
    so the leader moves while the healed follower catches up; the old leader returns."""
    run = Scenario(setting, "isolated-follower", producers=["client"], readers=["client"])
    run.wait_acks("client", time.monotonic())
    leader, _, replicas, _ = run.state()
    follower = next(r for r in replicas if r != leader)
    setting.network.isolate(f"spu-{follower}")
    wait_for("the in-sync set without the cut follower", lambda: follower not in run.state()[3], WAIT_S)
    run.wait_acks("client", time.monotonic())

    setting.network.heal()
    setting.cluster.signal(f"spu-{leader}", signal.SIGKILL)
    wait_for("a new leader", lambda: run.state()[0] not in (-1, leader), WAIT_S)
    run.wait_acks("client", time.monotonic())
    setting.cluster.start_spu(leader)
    run.wait_in_sync()
    assert run.finish() == []


def test_sink_commit_refused_for_want_of_replicas_waits_for_them(setting: Setting) -> None:
    """The Spark sink's commit (`commit_retrying`) on a topic that needs all three replicas in
    sync while a follower is cut off: bounded, it gives up saying so; patient, it keeps being
    refused (NOT_ENOUGH_REPLICAS, nothing written) until the link heals, then commits once."""
    topic = "commit-retry"
    config = TopicConfig(replication_factor=3, min_in_sync_replicas=3, replica_lag_time_max_ms=500)
    cluster, network = setting.cluster, setting.network
    with SpuClient(cluster.bootstrap) as client:
        client.create_topic(topic, config)
        client.stage("sink-query", 1, topic, 0, encode_batch([b"one", b"two"]))
        leader, _, replicas, _ = partition_state(cluster, topic)
        follower = next(r for r in replicas if r != leader)
        network.isolate(f"spu-{follower}")
        wait_for(
            "the follower out of sync", lambda: follower not in partition_state(cluster, topic)[3], WAIT_S
        )

        def commit() -> dict[tuple[str, int], int]:
            return client.commit("sink-query", 1, partitions={(topic, 0): 1})

        with pytest.raises(
            SpuError, match=r"commit of batch 1 refused \d+ times over .*commitRetryTimeout 0.3s"
        ):
            commit_retrying(commit, "batch 1", 0.3)

        refusals: list[Refusal] = []
        with ThreadPoolExecutor(1) as pool:
            done = pool.submit(commit_retrying, commit, "batch 1", WAIT_S, on_refusal=refusals.append)
            wait_for("two more refusals", lambda: len(refusals) >= 2, WAIT_S)
            assert [r.attempt for r in refusals[:2]] == [1, 2] and "in-sync" in refusals[0].message
            network.heal()
            assert done.result(WAIT_S) == {(topic, 0): 2}

    def committed_everywhere() -> bool:
        logs = [[v for _, _, v in replica_log(cluster.root / f"spu-{n}", topic)] for n in range(3)]
        return all(log == [b"one", b"two"] for log in logs)

    wait_for("the commit on every replica, once", committed_everywhere, WAIT_S)


def test_isolated_controller_then_a_leader_stopped_meanwhile(setting: Setting) -> None:
    """Scenarios 2 and 6: the controller is cut off from every SPU and client. The data path
    needs no controller: the leader goes on taking acks=all writes (its followers still fetch)
    after the controller has declared every SPU lost. Then the leader is SIGSTOPped for more
    than a session and continued while the controller is still away: having missed a session
    it may have been replaced, so it acknowledges nothing until it hears the controller again;
    healed, the controller elects a leader again and the writes go on."""
    run = Scenario(setting, "isolated-controller", producers=["client"], readers=["near"])
    run.wait_acks("client", time.monotonic())
    leader = f"spu-{run.state()[0]}"
    setting.network.isolate("sc")
    run.wait_acks("client", time.monotonic() + 1.2 * SESSION_S)  # the SPUs' sessions are over

    producer = run.producers["client"]
    setting.cluster.signal(leader, signal.SIGSTOP)
    stopped_at = time.monotonic()

    def stopped_long_enough() -> bool:  # the leader's loop stood still for more than a session
        return time.monotonic() > stopped_at + 1.5 * SESSION_S and producer.waiting() > 1.5 * SESSION_S

    wait_for("1.5 sessions stopped, with a produce waiting", stopped_long_enough, WAIT_S)
    setting.cluster.signal(leader, signal.SIGCONT)
    continued_at = time.monotonic()
    wait_for("a session since", lambda: time.monotonic() > continued_at + SESSION_S, WAIT_S)
    setting.network.heal()
    assert acknowledged_nothing(producer, continued_at, time.monotonic()) == []
    run.wait_acks("client", time.monotonic())
    run.wait_in_sync()
    assert run.finish() == []


def test_one_way_partition_of_the_leader(setting: Setting) -> None:
    """Scenario 4: the leader hears everyone and no one hears it (what it sends is dropped,
    what it is sent arrives). Its heartbeats stop reaching the controller, which elects a
    follower; its followers' fetches reach it but not its answers, so nothing it takes is
    acknowledged; clients on both client nodes find the new leader; healed, the old leader
    learns it follows and cuts the records it alone took."""
    run = Scenario(setting, "one-way", producers=["client", "near"], readers=["near"])
    run.wait_acks("client", time.monotonic())
    old_leader, old_epoch, _, _ = run.state()
    for node in NODES:
        if node != f"spu-{old_leader}":
            setting.network.cut(f"spu-{old_leader}", node, both_ways=False)
    wait_for("a new leader", lambda: run.state()[0] not in (-1, old_leader), WAIT_S)
    assert run.state()[1] > old_epoch
    run.wait_acks("client", time.monotonic())
    run.wait_acks("near", time.monotonic())
    setting.network.heal()
    run.wait_in_sync()
    assert run.finish() == []


def test_flapping_link_of_the_leader(setting: Setting) -> None:
    """Scenario 5: the leader's link goes down and up again, down for less than a session
    (TCP retransmits, the in-sync set shrinks and grows back) and for more (an election, and
    the old leader rejoins as a follower), while a client produces."""
    run = Scenario(setting, "flapping", producers=["client"], readers=["near"])
    run.wait_acks("client", time.monotonic())
    leader = f"spu-{run.state()[0]}"
    for down_s in (0.3, 1.2 * SESSION_S, 0.3):
        setting.network.isolate(leader)
        cut_at = time.monotonic()
        wait_for(f"{down_s}s down", lambda: time.monotonic() > cut_at + down_s, WAIT_S)  # noqa: B023
        setting.network.heal()
        healed_at = time.monotonic()
        wait_for("0.2s up", lambda: time.monotonic() > healed_at + 0.2, WAIT_S)  # noqa: B023
    run.wait_acks("client", time.monotonic())
    run.wait_in_sync()
    assert run.finish() == []


def test_lossy_then_slow_leader_link(setting: Setting) -> None:
    """Loss and delay (no partition): a tenth of the packets crossing the leader's link are
    dropped, either way, while a client produces and another reads; then, healed, every packet
    on it is held 50 ms each way (its round trips 0.1 s longer). TCP retransmits what is lost
    (a follower may fall out of the in-sync set meanwhile); acknowledgements go on through
    both, and the history checks out."""
    run = Scenario(setting, "lossy-slow", producers=["client"], readers=["near"])
    run.wait_acks("client", time.monotonic())
    leader = f"spu-{run.state()[0]}"
    setting.network.lose(leader, 10)
    run.wait_acks("client", time.monotonic())
    setting.network.heal()
    setting.network.delay(leader, 0.05)
    run.wait_acks("client", time.monotonic(), count=5)
    setting.network.heal()
    run.wait_in_sync()
    assert run.finish() == []


# The flow's input: 100 events to warm up, 100 streaming at 100/s before the cut, 200 fed while
# it lasts; then 500 more at 100/s, the SIGKILL after the first 100 are out, the last 250 once the
# killed SPU is back
FLOW_FEED = Feed(events=WARM_UP + 300, before_cut=100, per_second=100)
FLOW_EVENTS = FLOW_FEED.events + 500  # 225 a group: 22 windows each
FLOW_CUT_S = 3.0  # past TCP's first retransmissions: the runtime's requests to the leader hang
FLOW_WAIT_S = 240.0  # a Spark start and a first stateful micro-batch on a loaded 2-core box


@pytest.mark.timeout(600)  # as the loopback flow tests: a Spark start on a loaded box
def test_a_flow_cut_from_then_losing_its_outputs_leader_delivers_every_event_once(
    setting: Setting, tmp_path: Path
) -> None:
    """A flow across hosts: `contraflow run FLOW --spu A,B,C` on a node of its own with its local
    Spark there (tests/faults/flow.py: `in` passed through to `passed` and counted per group
    in windows of 10 into `counted`, a stateful pipeline whose group key comes from a
    `python::batch` whose module sits next to the flow file, every edge a three-replica `log`
    topic). Once `pass` streams, the runtime is cut from the leader of `passed` for a few
    seconds while the input goes on (`count`'s first micro-batch may still be running: not
    waiting for it saves its time), then healed, and everything comes out. Then, mid-stream
    again, that leader is SIGKILLed and restarted once another leads, and the input goes on
    after it. Every event is in `passed` once, every window in `counted` once with the right
    counts and numbers (the state carried on through the cut and the kill), the map's error
    once in `errors`, the runtime drains and exits 0, no node has a socket listening beyond
    its address and loopback, and the restarted SPU is back in sync. On a Spark standalone
    master and workers each on a node of its own, with a worker cut too, it is
    benchmarks/flow_partition.py (`make flow-partition`): minutes; on a standalone cluster on
    loopback losing a worker too, tests/spark/test_cluster.py."""
    cluster = setting.cluster
    with SpuClient(cluster.bootstrap) as client:
        create_topics(client)
        run = start_runtime(setting, tmp_path, spark=None)
        try:
            run.wait_until(run.running, FLOW_WAIT_S, "the flow to start")
            warm_up(cluster.bootstrap, run, client)  # `count` may still be starting
            cut = cut_from_leader(setting, run, client, FLOW_FEED, FLOW_CUT_S, FLOW_WAIT_S)
            assert cut["fed_while_cut"] > 0, cut  # the input went on while the runtime was cut
            killed = kill_leader_mid_stream(setting, run, client, FLOW_FEED.events, FLOW_EVENTS, FLOW_WAIT_S)
            assert listening_beyond(setting.network, setting.network.nodes) == []
            assert run.terminate() == 0, run.tail()
        finally:
            run.kill()
        assert_exactly_once(client, FLOW_EVENTS)  # after the drain: anything written twice is in
    wait_for(
        "the restarted SPU back in sync", lambda: killed in partition_state(cluster, "passed")[3], WAIT_S
    )
