"""A controller whose own event loop stalled does not declare the SPUs it could not hear lost.

A real controller in this process; its loop is blocked for longer than a session (as by an
fsync of its metadata on a busy disk) while the SPUs keep beating. Their heartbeats are
read only after the stall, and the session check runs first: it must not count the stall as
the SPUs' silence.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.spu.controller.test_controller_isr import SESSION_S, SPUS, heartbeat

from contraflow.spu.controller.controller import Controller
from contraflow.spu.protocol import messages as m


async def leaders_around_a_stall(data_dir: Path) -> list[tuple[int, int]]:
    """(leader, epoch) of a topic's partition before and after a stall of two sessions."""
    controller = Controller(data_dir, "127.0.0.1:0", session_timeout_s=SESSION_S)
    await controller.start()
    try:
        for spu in SPUS:
            await controller.heartbeat(heartbeat(spu, []))
        creating = asyncio.create_task(
            controller.create_topic(m.CreateTopicRequest("t", {"replication_factor": 3}))
        )
        for spu in SPUS:
            await controller.heartbeat(heartbeat(spu, [["t", 0, 0, 0, 0, 1]]))
        await creating
        state = controller.cluster.topics["t"].partitions[0]
        before = (state.leader, state.leader_epoch)
        time.sleep(2 * SESSION_S)  # the stall: the loop blocked, the session check not run
        await asyncio.sleep(0.05)  # the check runs first; the heartbeats sent meanwhile come next
        for spu in SPUS:
            await controller.heartbeat(heartbeat(spu, [["t", 0, 0, 0, 0, 1]]))
        await asyncio.sleep(0.15)  # a check or two with the heartbeats heard
        return [before, (state.leader, state.leader_epoch)]
    finally:
        await controller.stop()


def test_a_stall_of_the_controller_itself_does_not_cost_live_spus_their_sessions(tmp_path: Path) -> None:
    before, after = asyncio.run(leaders_around_a_stall(tmp_path))
    assert after == before, "the same leader at the same epoch: no SPU was declared lost"
    assert before[0] in SPUS and before[1] == 1
