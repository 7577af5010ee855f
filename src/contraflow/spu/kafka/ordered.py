"""Work that must keep its order per key, run in the SPU's thread pool a group at a time.

Kafka producers pipeline produce requests, and appends to a partition must happen
in the order the requests came. Handing each request to the pool on its own
costs a thread hop (and a GIL hand-over) per request, and on a busy machine each
hop waits for the scheduler. Here jobs for a key that queue up while one group
runs go to the pool together, in order, in the next single call: a burst of
requests costs one hop, and a lone request pays no extra latency.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from concurrent.futures import Executor
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")
Job = Callable[[], R]


class OrderedJobs(Generic[K, R]):
    """`submit(key, job)` resolves to `job()`, called after every job submitted before it for `key`."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._queues: dict[K, list[tuple[Job[R], asyncio.Future[R]]]] = {}
        self._drainers: dict[K, asyncio.Task[None]] = {}  # keeps the running drains referenced

    def submit(self, key: K, job: Job[R]) -> asyncio.Future[R]:
        """Queue `job` now (its place in the order is taken here, not when awaited)."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(key, []).append((job, future))
        if key not in self._drainers:
            self._drainers[key] = asyncio.create_task(self._drain(key))
        return future

    async def _drain(self, key: K) -> None:
        loop = asyncio.get_running_loop()
        try:
            while group := self._queues.pop(key, []):
                jobs = [job for job, _ in group]
                try:
                    outcomes = await loop.run_in_executor(self._executor, self._run_all, jobs)
                except Exception as err:  # the pool itself failed (shutdown): fail the group
                    outcomes = [err] * len(group)
                for (_, future), outcome in zip(group, outcomes, strict=True):
                    _settle(future, outcome)
        finally:
            del self._drainers[key]

    @staticmethod
    def _run_all(jobs: list[Job[R]]) -> list[R | Exception]:
        """Worker thread: each job in order; one job's failure is its own."""
        outcomes: list[R | Exception] = []
        for job in jobs:
            try:
                outcomes.append(job())
            except Exception as err:
                outcomes.append(err)
        return outcomes


def _settle(future: asyncio.Future[R], outcome: R | Exception) -> None:
    if future.done():  # its request was cancelled meanwhile
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
