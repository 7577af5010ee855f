"""Gates hold for independent reasons; acks follow the delivered frontier in pull order."""

from __future__ import annotations

import asyncio
from typing import Any

from contraflow.runtime.acks import AckTracker
from contraflow.runtime.gate import Gate


def test_a_gate_opens_only_when_every_reason_is_released() -> None:
    async def scenario() -> None:
        gate = Gate()
        gate.hold("paused", "paused")
        gate.hold("breaker:out", "breaker open: out refused")
        waiter = asyncio.ensure_future(gate.wait())
        gate.release("paused")
        await asyncio.sleep(0.01)
        assert not waiter.done() and gate.reasons == ["breaker open: out refused"]
        gate.release("breaker:out")
        await asyncio.wait_for(waiter, 1)
        assert gate.is_open

    asyncio.run(scenario())


class Recorder:
    def __init__(self) -> None:
        self.acked: list[Any] = []
        self.failed: list[Any] = []
        self.ctx = type("Ctx", (), {"name": "f/src"})()

    async def ack(self, token: Any) -> None:
        self.acked.append(token)

    async def fail(self, token: Any) -> None:
        self.failed.append(token)


def _done(offset: int) -> asyncio.Future[int]:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    future.set_result(offset)
    return future


def test_tokens_are_acked_in_order_behind_the_frontier() -> None:
    async def scenario() -> None:
        source = Recorder()
        tracker = AckTracker(source, persisted=False)  # type: ignore[arg-type]
        tracker.track("t0", {"ch": _done(4)})
        tracker.track("t1", {"ch": _done(9), "err": _done(0)})
        tracker.track("t2", {})  # produced nothing (a partial line): acked with its predecessors
        await tracker.advance({"ch": 5, "err": 0})
        assert source.acked == ["t0"]
        await tracker.advance({"ch": 10, "err": 1})
        assert source.acked == ["t0", "t1", "t2"] and tracker.pending == 0

    asyncio.run(scenario())


def test_persisted_acks_once_the_log_confirmed_and_failed_appends_fail() -> None:
    async def scenario() -> None:
        source = Recorder()
        tracker = AckTracker(source, persisted=True)  # type: ignore[arg-type]
        pending: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        broken: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        broken.set_exception(ConnectionError("SPU gone"))
        tracker.track("t0", {"ch": _done(0)})
        tracker.track("t1", {"ch": pending})
        tracker.track("t2", {"ch": broken})
        await tracker.advance()
        assert source.acked == ["t0"]
        pending.set_result(1)
        await tracker.advance()
        assert source.acked == ["t0", "t1"] and source.failed == ["t2"]

    asyncio.run(scenario())
