"""A new process of an SPU (a new heartbeat session) leads nothing at its old epoch.

A real controller in this process, with its metadata in files, restarted on the same files
where the test says so; the SPUs are their heartbeats. The cluster test that shows what
goes wrong otherwise (records acknowledged with acks=all lost) is in
tests/spu/node/replication/test_cluster_replication.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.spu.controller.test_controller_isr import SESSION_S, SPUS

from contraflow.spu.controller.controller import Controller
from contraflow.spu.protocol import messages as m

Placement = tuple[int, int, list[int]]  # leader, epoch, in-sync set


def beat(spu: int, process: int) -> m.HeartbeatRequest:
    return m.HeartbeatRequest(
        spu,
        f"spu-{spu}-process-{process}",
        f"127.0.0.1:{9000 + spu}",
        f"127.0.0.1:{9100 + spu}",
        [["t", 0, 0, 0, 0, 1]],
    )


def placement(controller: Controller) -> Placement:
    state = controller.cluster.topics["t"].partitions[0]
    return state.leader, state.leader_epoch, sorted(state.isr)


async def started(data_dir: Path) -> Controller:
    controller = Controller(data_dir, "127.0.0.1:0", session_timeout_s=SESSION_S)
    await controller.start()
    return controller


async def restarts(data_dir: Path, replication_factor: int) -> list[Placement]:
    """The partition's placement: once created; after its leader restarted while the controller
    ran; after the controller restarted and heard the same processes again; after the
    controller restarted and the leader restarted before beating to it."""
    processes = dict.fromkeys(SPUS, 1)  # each SPU's process: a restart counts one up
    controller = await started(data_dir)
    try:
        for spu in SPUS:
            await controller.heartbeat(beat(spu, processes[spu]))
        config = {"replication_factor": replication_factor}
        await controller.create_topic(m.CreateTopicRequest("t", config))
        seen = [placement(controller)]
        processes[seen[-1][0]] += 1
        await controller.heartbeat(beat(seen[-1][0], processes[seen[-1][0]]))
        seen.append(placement(controller))
    finally:
        await controller.stop()
    for restart_leader in (False, True):
        if restart_leader:
            processes[seen[-1][0]] += 1
        controller = await started(data_dir)
        try:
            for spu in SPUS:
                await controller.heartbeat(beat(spu, processes[spu]))
            seen.append(placement(controller))
        finally:
            await controller.stop()
    return seen


def test_a_restarted_leader_hands_over_at_a_new_epoch_also_across_a_controller_restart(
    tmp_path: Path,
) -> None:
    created, restarted, same, restarted_unheard = asyncio.run(restarts(tmp_path, 3))
    assert created[1] == 1 and created[2] == sorted(SPUS)
    assert restarted[0] != created[0] and restarted[1] == 2, "another in-sync replica leads, at a new epoch"
    assert created[0] not in restarted[2]
    assert same == restarted, "the same processes heard by a restarted controller: nothing moves"
    assert restarted_unheard[0] != restarted[0] and restarted_unheard[1] == 3
    assert restarted[0] not in restarted_unheard[2]


def test_a_restarted_lone_replica_leads_again_at_a_new_epoch(tmp_path: Path) -> None:
    created, restarted, same, restarted_unheard = asyncio.run(restarts(tmp_path, 1))
    assert [p[:2] for p in (created, restarted, same, restarted_unheard)] == [
        (created[0], 1),
        (created[0], 2),
        (created[0], 2),
        (created[0], 3),
    ], "no other replica: it leads on at once, but never at the epoch its old process had"
