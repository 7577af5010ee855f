"""The controller's answer to a leader that asks to take a follower back in sync.

A real controller in this process, with its metadata in files; the SPUs are
its heartbeats (sent as their servers would), so one can go silent on cue.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from contraflow.spu.controller.controller import Controller
from contraflow.spu.protocol import messages as m

SESSION_S = 0.5
SPUS = (1, 2, 3)


def heartbeat(spu: int, partitions: list[list[object]]) -> m.HeartbeatRequest:
    return m.HeartbeatRequest(
        spu, f"session-{spu}", f"127.0.0.1:{9000 + spu}", f"127.0.0.1:{9100 + spu}", partitions
    )


async def keep_alive(controller: Controller, alive: set[int], partitions: list[list[object]]) -> None:
    """Heartbeats of the SPUs in `alive` (read on every round) until cancelled."""
    while True:
        for spu in sorted(alive):
            await controller.heartbeat(heartbeat(spu, partitions))
        await asyncio.sleep(SESSION_S / 5)


async def lost_follower_scenario(data_dir: Path) -> tuple[list[int], list[int], list[int], int]:
    """(in-sync set once a follower's session lapsed, the answer to taking it back then,
    the answer once its heartbeats are back, the follower)."""
    controller = Controller(data_dir, "127.0.0.1:0", session_timeout_s=SESSION_S)
    await controller.start()
    alive = set(SPUS)
    for spu in SPUS:  # registered before the topic is placed
        await controller.heartbeat(heartbeat(spu, []))
    beating = asyncio.create_task(keep_alive(controller, alive, [["t", 0, 0, 0, 0, 1]]))
    try:
        await controller.create_topic(m.CreateTopicRequest("t", {"replication_factor": 3}))
        state = controller.cluster.topics["t"].partitions[0]
        follower = next(r for r in state.replicas if r != state.leader)
        alive.discard(follower)
        while follower in state.isr:  # the controller declares it lost after its session
            await asyncio.sleep(0.05)
        after_loss = list(state.isr)
        back = sorted([*state.isr, follower])
        request = m.AlterIsrRequest("t", 0, state.leader, state.leader_epoch, back)
        refused = (await controller.alter_isr(request)).fields["isr"]
        alive.add(follower)
        await asyncio.sleep(SESSION_S / 2)  # its heartbeats are heard again
        accepted = (await controller.alter_isr(request)).fields["isr"]
        return after_loss, refused, accepted, follower
    finally:
        beating.cancel()
        await controller.stop()


def test_a_follower_without_a_live_session_is_not_taken_back_in_sync(tmp_path: Path) -> None:
    after_loss, refused, accepted, follower = asyncio.run(lost_follower_scenario(tmp_path / "sc"))
    assert follower not in after_loss and len(after_loss) == 2
    assert sorted(refused) == sorted(after_loss)  # the lost follower stays out
    assert sorted(accepted) == sorted([*after_loss, follower])  # back once it heartbeats again
