"""The runtime's Spark session, awaited only where a query starts.

Why: a flow whose pipelines are all aliased (`runtime.aliases`) or that has
none runs no Spark query, and Spark's JVM takes seconds (tens on a loaded
2-core box) to start: such a flow need not wait for it. `contraflow run`
begins the start at once, in a thread (`start`), so that it overlaps
compiling the flows and starting the SPU, as flows that do run a query want;
a runtime given none starts it on the first `session()`. Whoever starts a
query awaits `session()`; a deployment that needs one awaits it before
starting anything (`Runtime.deploy_graphs`), so while Spark starts no running
flow depends on it.

A failed start is final for the process: every later `session()` raises
`SparkUnavailable` with the reason (the JVM's own output is in the run's log).
`stop()` ends a running session, and one still starting at once: its driver
JVM is ended (`contraflow.spark.gateway_launch`) rather than waited for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from contraflow.api.facade import SparkState, SparkUnavailable

log = logging.getLogger("contraflow.runtime.spark")

StartSession = Callable[[], "Future[Any]"]  # begins building a session in a thread (`start_session`)
STOPPED = "Spark is stopped: the runtime is shutting down"


class SparkOnDemand:
    """A Spark session that starts on first demand; `start` begins it earlier."""

    def __init__(self, start: StartSession | None = None, master: str = "local[*]") -> None:
        self.master = master
        self._start = start
        self._future: Future[Any] | None = None
        self._stopped = False
        self._earlier_gateways: frozenset[int] = frozenset()  # JVMs the start's launch is not
        self.began = asyncio.Event()  # set by `start` (from the loop, or before it runs)
        self.began_at: float | None = None
        self.ready_at: float | None = None

    @classmethod
    def of(cls, spark: Any) -> SparkOnDemand:
        """A session already running (tests, benchmarks); None: a runtime that has no Spark."""
        if spark is None:
            return cls()
        started: Future[Any] = Future()
        started.set_result(spark)
        supply = cls(lambda: started)
        supply.start()
        return supply

    @property
    def state(self) -> SparkState:
        future = self._future
        if self._stopped:
            return "stopped"
        if future is None:
            return "not started"
        if not future.done():
            return "starting"
        return "failed" if future.exception() is not None else "running"

    def start(self) -> None:
        """Begin starting Spark, unless it began already (or this runtime has no Spark)."""
        if self._future is not None or self._start is None or self._stopped:
            return
        from contraflow.spark.gateway_launch import launching_gateways

        self.began_at = time.monotonic()
        self._earlier_gateways = frozenset(launching_gateways())
        self._future = self._start()
        self._future.add_done_callback(self._finished)
        self.began.set()

    def _finished(self, future: Future[Any]) -> None:
        self.ready_at = time.monotonic()
        if future.exception() is not None:
            log.info("Spark's start failed", exc_info=future.exception())  # the log file only

    def failure(self) -> str | None:
        """Why the start failed, in a line; None unless it did."""
        future = self._future
        error = future.exception() if future is not None and future.done() else None
        return None if error is None else _headline(error)

    def starting_for(self) -> float:
        """Seconds since the start began (0 before it did)."""
        return time.monotonic() - self.began_at if self.began_at is not None else 0.0

    def started_in(self) -> float:
        """Seconds the start took (once it ended; its done-callback may still be on its way)."""
        assert self.began_at is not None
        return (self.ready_at or time.monotonic()) - self.began_at

    async def settled(self, timeout_s: float | None = None) -> bool:
        """Wait (at most `timeout_s`) until a start that began has ended, either way; True once it has."""
        await self.began.wait()
        assert self._future is not None
        if not self._future.done():
            await asyncio.wait({asyncio.wrap_future(self._future)}, timeout=timeout_s)
        return self._future.done()

    async def session(self) -> Any:
        """The running session, starting Spark if nobody did yet and waiting while it starts."""
        self.start()
        if self._stopped:
            raise SparkUnavailable(STOPPED)
        if self._future is None:
            raise SparkUnavailable("this runtime has no Spark session")
        try:
            return await asyncio.shield(asyncio.wrap_future(self._future))
        except Exception as err:  # noqa: BLE001 - any failure to start is the same answer
            if self._stopped:
                raise SparkUnavailable(STOPPED) from None
            raise SparkUnavailable(f"Spark did not start: {_headline(err)}") from None

    async def stop(self) -> None:
        """Stop the session: a running one with `spark.stop()`, one still starting by ending its
        JVM (nothing runs on it yet: deployments that need it wait for it). Waiters get
        `SparkUnavailable`."""
        from contraflow.spark.gateway_launch import end_launch

        future, stopped_before = self._future, self._stopped
        self._stopped = True
        if stopped_before or future is None:
            return
        if not future.done():
            log.info("Spark is still starting: its driver JVM is ended")
            await asyncio.to_thread(end_launch, future, self._earlier_gateways)
        if future.done() and future.exception() is None:
            await asyncio.to_thread(future.result().stop)


def _headline(err: BaseException) -> str:
    """The first line of an error (PySpark's carry the JVM's stack trace after it)."""
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0]
