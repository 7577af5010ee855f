"""A leader's lease: an acks=1 write is refused once the controller may have replaced the SPU.

The controller declares an SPU lost a session after the last beat it heard, so the SPU
may lead only until the send time of its last answered beat plus a session. A stop shorter
than a session that began just before a beat was due leaves no gap in the SPU's own loop,
yet the controller may have elected another leader meanwhile (the load-sensitive failure of
test_a_resumed_old_leader_is_fenced). A real controller and an SPU's agent and replicas run
in this process; the agent's clock is the test's, so a stall is a jump of that clock and the
answer to a beat sent before it can be read after it, deterministically.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from contraflow.spu.controller.controller import Controller
from contraflow.spu.node.partitions import Partitions
from contraflow.spu.node.replication.agent import ClusterAgent
from contraflow.spu.node.replication.replicas import ReplicaManager
from contraflow.spu.node.signals import PartitionSignals
from contraflow.spu.protocol import Acks, ErrorCode, SpuError
from contraflow.spu.protocol import messages as m
from contraflow.spu.storage.store import Store

SESSION_S = 60.0  # the controller's real-time watch must not act during the test
TP = ("t", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def until(check: Callable[[], bool], act: Callable[[], Awaitable[object]] | None = None) -> None:
    """Poll `check` (doing `act` before each look) for at most 10 s of real time."""
    deadline = asyncio.get_running_loop().time() + 10.0
    while True:
        if act is not None:
            await act()
        if check():
            return
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def leads(replicas: ReplicaManager) -> bool:
    return produce_answer(replicas, Acks.COMMITTED) is ErrorCode.NONE


def produce_answer(replicas: ReplicaManager, acks: Acks) -> ErrorCode:
    try:
        replicas.leading.check_produce(TP, acks)
    except SpuError as err:
        return err.code
    return ErrorCode.NONE


def replica_manager(agent: ClusterAgent, store: Store, executor: ThreadPoolExecutor) -> ReplicaManager:
    """SPU 1's replicas, fenced by `agent`'s suspension and lease."""
    signals = PartitionSignals(asyncio.get_running_loop())
    partitions = Partitions(store, lambda tp: None)
    return ReplicaManager(
        1, partitions, signals, executor, agent.alter_isr, agent.suspended, agent.lease_lapsed
    )


async def scenario(root: Path) -> list[tuple[str, ErrorCode, ErrorCode]]:
    """(step, the answer to an acks=1 produce, to an acks=all produce) after each step."""
    controller = Controller(root / "sc", "127.0.0.1:0", session_timeout_s=SESSION_S)
    host, port = await controller.start()
    clock = Clock()
    seen: list[tuple[str, ErrorCode, ErrorCode]] = []
    with ThreadPoolExecutor(1) as executor, Store(root / "spu") as store:
        agent = ClusterAgent(1, f"{host}:{port}", clock)
        replicas = agent.replicas = replica_manager(agent, store, executor)
        applying = asyncio.create_task(agent._apply_loop())  # no beat loop: the test beats

        async def step(name: str, action: Awaitable[None] | None = None) -> None:
            if action is not None:
                await action
            agent.pulse()  # the loop ran: no stall reached a session, suspended() stays False
            seen.append(
                (name, produce_answer(replicas, Acks.LEADER), produce_answer(replicas, Acks.COMMITTED))
            )

        async def stall(fraction: float) -> None:
            clock.now += fraction * SESSION_S

        async def renewed() -> None:
            """Beat and wait for its metadata to be applied (a beat that brings no new
            version is applied after `refresh` returns)."""
            await until(lambda: not agent.lease_lapsed(), agent.refresh)

        async def answer_read_after_a_stall() -> None:
            beat = asyncio.create_task(agent.refresh())
            await asyncio.sleep(0)  # the beat is sent, its send time taken
            clock.now += 0.95 * SESSION_S
            await beat

        try:
            await agent.heartbeat()  # registered
            creating = asyncio.create_task(controller.create_topic(m.CreateTopicRequest("t", {})))
            await until(lambda: "t" in controller.cluster.topics)
            await until(lambda: leads(replicas), agent.refresh)
            await until(creating.done, agent.heartbeat)  # it waits for the SPU to report the partition
            await step("leading")
            await step("0.85 session later", stall(0.85))
            await step("0.95 session after the last beat", stall(0.1))
            await step("a beat sent now, applied", renewed())
            await step("a beat answered after a stall", answer_read_after_a_stall())
            await step("the next beat, applied", renewed())
        finally:
            applying.cancel()
            await agent.close()
            await controller.stop()
    return seen


def test_an_acks_1_write_needs_the_lease_of_a_beat_sent_less_than_a_session_ago(tmp_path: Path) -> None:
    ok, refused = ErrorCode.NONE, ErrorCode.NOT_LEADER
    assert asyncio.run(scenario(tmp_path)) == [
        ("leading", ok, ok),
        ("0.85 session later", ok, ok),
        # no gap in the loop (suspended() is False), but the controller may act soon:
        # acks=1 is refused, acks=all is fenced by the followers and goes on
        ("0.95 session after the last beat", refused, ok),
        ("a beat sent now, applied", ok, ok),
        # what it says is from before the stall: the SPU may have been replaced since
        ("a beat answered after a stall", refused, ok),
        ("the next beat, applied", ok, ok),
    ]


async def beat_to_a_silent_controller(root: Path, session_s: float) -> SpuError:
    """One beat to a controller that accepts the connection and never answers, with a session
    of `session_s` (as a controller's earlier answer sets it): the error the beat ends with."""
    connections = []  # kept open, unanswered
    silent = await asyncio.start_server(lambda r, w: connections.append(w), "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    with ThreadPoolExecutor(1) as executor, Store(root) as store:
        agent = ClusterAgent(1, f"127.0.0.1:{port}")
        agent.replicas = replica_manager(agent, store, executor)
        agent.session_timeout_s = session_s
        try:
            await agent.heartbeat()
        except SpuError as err:
            return err
        finally:
            await agent.close()
            silent.close()
    raise AssertionError("a silent controller answered")


def test_a_beat_waits_for_its_answer_only_as_long_as_the_answer_could_renew_the_lease(
    tmp_path: Path,
) -> None:
    # With 5 s for every answer, one lost beat on a 1 s session held the next one back past the
    # lease, and acks=0/1 writes were refused for up to 5 s.
    err = asyncio.run(beat_to_a_silent_controller(tmp_path, session_s=0.5))
    assert err.code is ErrorCode.TIMEOUT
    assert "within 0.45s" in str(err), err  # the session less the lease margin
