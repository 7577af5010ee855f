"""`unless_stopped`: the one race between some work and a stop event, ending the same way everywhere."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from contraflow.stopping import STOPPED, sleep_unless, unless_stopped

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def test_work_that_finishes_first_gives_its_result() -> None:
    async def main() -> object:
        return await unless_stopped(asyncio.sleep(0.01, result="done"), asyncio.Event())

    assert run(main()) == "done"


def test_work_that_fails_first_raises_as_if_awaited() -> None:
    async def boom() -> None:
        raise ValueError("bad input")

    async def main() -> object:
        return await unless_stopped(boom(), asyncio.Event())

    with pytest.raises(ValueError, match="bad input"):
        run(main())


def test_a_stop_cancels_the_work_and_waits_for_it() -> None:
    cleaned: list[str] = []

    async def slow() -> str:
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append("finally ran")
        return "never"

    async def main() -> object:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.02, stop.set)
        return await unless_stopped(slow(), stop)

    assert run(main()) is STOPPED
    assert cleaned == ["finally ran"], "the work is finished, not left pending"


def test_an_error_raised_while_being_cancelled_is_part_of_stopping() -> None:
    async def noisy() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise StopAsyncIteration from None

    async def main() -> object:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, stop.set)
        return await unless_stopped(noisy(), stop)

    assert run(main()) is STOPPED


def test_a_result_made_while_being_cancelled_is_kept() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "taken from the queue already"
        return "never"

    async def main() -> object:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, stop.set)
        return await unless_stopped(stubborn(), stop)

    assert run(main()) == "taken from the queue already"


def test_an_item_already_in_the_queue_wins_over_a_stop_in_the_same_turn() -> None:
    async def main() -> object:
        queue: asyncio.Queue[str] = asyncio.Queue()
        stop = asyncio.Event()
        getter = asyncio.ensure_future(unless_stopped(queue.get(), stop))
        await asyncio.sleep(0)  # the getter waits on the empty queue
        queue.put_nowait("item")
        stop.set()
        result = await getter
        return result, queue.qsize()

    result, left = run(main())
    assert (result, left) in {("item", 0), (STOPPED, 1)}, "an item is either returned or still queued"


def test_an_already_set_stop_does_not_start_the_work() -> None:
    started: list[bool] = []

    async def work() -> None:
        started.append(True)

    async def main() -> object:
        stop = asyncio.Event()
        stop.set()
        return await unless_stopped(work(), stop)

    assert run(main()) is STOPPED
    assert started == []


def test_cancelling_the_caller_cancels_the_work() -> None:
    async def main() -> bool:
        work = asyncio.ensure_future(asyncio.sleep(60))
        caller = asyncio.ensure_future(unless_stopped(work, asyncio.Event()))
        await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.sleep(0)
        return work.cancelled()

    assert run(main()) is True


def test_sleep_unless_ends_early_on_stop_and_says_so() -> None:
    async def main() -> tuple[bool, bool, float]:
        loop = asyncio.get_running_loop()
        quiet = await sleep_unless(asyncio.Event(), 0.01)
        stop = asyncio.Event()
        loop.call_later(0.02, stop.set)
        start = loop.time()
        stopped = await sleep_unless(stop, 60)
        return quiet, stopped, loop.time() - start

    quiet, stopped, waited = run(main())
    assert quiet is False and stopped is True
    assert waited < 30
