"""An SPU keeps its session while applying metadata takes long.

A real controller and an SPU's cluster agent and replicas in this process, on loopback;
the replicas' one worker thread is kept busy (as by a slow append or fsync on a loaded box),
so applying a new topic waits. The heartbeats must go on meanwhile: when they waited for
the apply, the controller declared the live SPU lost after one session and its partitions
went elsewhere (or offline). Once the worker is free the metadata is applied.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from contraflow.spu.controller.controller import Controller
from contraflow.spu.node.partitions import Partitions
from contraflow.spu.node.replication.agent import ClusterAgent
from contraflow.spu.node.replication.replicas import ReplicaManager
from contraflow.spu.node.signals import PartitionSignals
from contraflow.spu.protocol import SpuError
from contraflow.spu.protocol import messages as m
from contraflow.spu.storage.store import Store

SESSION_S = 1.0  # as the cluster tests: a beat every 0.25 s leaves 0.75 s of slack on a loaded box
SPU = 1


async def poll(check: object, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def scenario(root: Path) -> tuple[list[int], int]:
    """(leader and epoch of the topic after several sessions of a held apply, the SPU's
    answer once the worker is free: the partition it leads)."""
    controller = Controller(root / "sc", "127.0.0.1:0", session_timeout_s=SESSION_S)
    host, port = await controller.start()
    worker_free = threading.Event()
    with ThreadPoolExecutor(1) as executor, Store(root / "spu") as store:
        agent = ClusterAgent(SPU, f"{host}:{port}")
        signals = PartitionSignals(asyncio.get_running_loop())
        replicas = agent.replicas = ReplicaManager(
            SPU, Partitions(store, lambda tp: None), signals, executor, agent.alter_isr, agent.suspended
        )
        running = [asyncio.create_task(agent.tick()), asyncio.create_task(agent.run())]  # as the SPU does
        try:
            await poll(lambda: agent.metadata is not None)  # registered
            executor.submit(worker_free.wait)  # the apply's work now waits for the worker
            creating = asyncio.create_task(controller.create_topic(m.CreateTopicRequest("t", {})))
            await poll(lambda: "t" in controller.cluster.topics)
            await asyncio.sleep(2.5 * SESSION_S)  # what is tested: sessions passing, the apply held
            state = controller.cluster.topics["t"].partitions[0]
            held = [state.leader, state.leader_epoch]
            worker_free.set()
            await creating
            await poll(lambda: leads(replicas))
            return held, replicas.leading.leader(("t", 0)).epoch
        finally:
            worker_free.set()
            for task in running:
                task.cancel()
            await agent.close()
            await controller.stop()


def leads(replicas: ReplicaManager) -> bool:
    try:
        replicas.leading.leader(("t", 0))
        return True
    except SpuError:
        return False


def test_heartbeats_go_on_while_the_metadata_apply_waits_for_a_busy_worker(tmp_path: Path) -> None:
    held, epoch = asyncio.run(scenario(tmp_path))
    assert held == [SPU, 1], "the SPU kept its session and its partition"
    assert epoch == 1
