"""Ordered, grouped appends for one connection and one partition.

A client pipelines produce requests; they must reach the log in the order they
were sent, and each append runs in a worker thread (it may fsync). Handing every
request to the pool separately would serialise a thread hop per request. Here
requests that arrive while an append is running queue up and all go to the pool
in the next single call, in order: one hop for many batches, same order, and a
lone request pays no extra latency.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

from contraflow.spu.node.partitions import AppendRequest, AppendResult, Partitions
from contraflow.spu.protocol.topics import TopicPartition


class OrderedAppender:
    def __init__(self, partitions: Partitions, executor: Executor, tp: TopicPartition) -> None:
        self._partitions = partitions
        self._executor = executor
        self.tp = tp
        self._queue: list[tuple[AppendRequest, asyncio.Future[tuple[int, int]]]] = []
        self._draining = False
        self._drainer: asyncio.Future[None] | None = None  # keeps the running task referenced

    async def append(self, request: AppendRequest) -> tuple[int, int]:
        """(first offset, last offset) of the request's batches, once appended."""
        future: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        self._queue.append((request, future))
        if not self._draining:
            self._draining = True
            self._drainer = asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                group, self._queue = self._queue, []
                requests = [request for request, _ in group]
                try:
                    results: list[AppendResult] = await loop.run_in_executor(
                        self._executor, self._partitions.produce_many, self.tp, requests
                    )
                except Exception as err:  # the pool itself failed (shutdown): fail the group
                    results = [err] * len(group)
                for (_, future), result in zip(group, results, strict=True):
                    _settle(future, result)
        finally:
            self._draining = False


def _settle(future: asyncio.Future[tuple[int, int]], result: AppendResult) -> None:
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
