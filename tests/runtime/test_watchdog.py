"""The loop watchdog names a blocked event loop, and stays quiet on a healthy one."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from contraflow.runtime.watchdog import watch_loop


def test_a_blocking_call_on_the_loop_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        dog = asyncio.ensure_future(watch_loop(interval_s=0.05, threshold_s=0.2))
        await asyncio.sleep(0.2)
        assert not caplog.records  # healthy so far
        time.sleep(0.5)  # a connector forgetting to_thread
        await asyncio.sleep(0.15)
        dog.cancel()

    with caplog.at_level(logging.WARNING, "contraflow.runtime.watchdog"):
        asyncio.run(scenario())
    blocked = [r for r in caplog.records if getattr(r, "event", None) == "watchdog"]
    assert len(blocked) == 1 and blocked[0].blocked_s >= 0.4
