"""A sink task's stage requests, spread over as many SPU connections as its output needs.

The SPU counts staged bytes against the connection that sent them until the
batch commits, and refuses a connection more than `max_staged_bytes` (64 MiB
by default) so one client cannot fill its memory. One task's share of a
micro-batch can be larger than that: a stateful pipeline whose groups all
land in one partition, large events, channels sized for large batches. So a
task moves to a new connection before one would go over its share
(`stageBytesPerConnection`, 48 MiB by default). That is safe because stage
requests are numbered per writer, not per connection: the SPU commits them in
the writer's order whichever connection each came by, and a closed
connection's staged batches stay until the commit or abort.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.protocol.batch import Buffer

DEFAULT_BYTES_PER_CONNECTION = 48 << 20


@dataclass(frozen=True)
class StageRequest:
    """Where a task's batches go: one (query, micro-batch) transaction, one partition, one writer."""

    query_id: str
    batch_id: int
    topic: str
    partition: int
    writer: str
    attempt: int


class ConnectionStager:
    """Sends stage requests with at most `in_flight` outstanding, and at most
    `bytes_per_connection` staged per connection (a single larger request still goes, alone)."""

    def __init__(self, connect: Callable[[], Any], *, bytes_per_connection: int, in_flight: int) -> None:
        self._connect = connect
        self._limit = bytes_per_connection
        self._max_in_flight = in_flight
        self._pending: deque[Future[bool]] = deque()
        self._client: Any = connect()
        self._bytes = 0
        self._ranges_refused = False
        self.connections = 1

    @property
    def client(self) -> Any:
        """The connection now in use (also for the task's other requests, e.g. describing topics)."""
        return self._client

    def stage(
        self, batch: bytes | bytearray | Sequence[Buffer], request: StageRequest, *, sequence: int
    ) -> None:
        """Send one encoded record batch (whole, or as the parts it is sent in), the writer's `sequence`-th."""
        size = len(batch) if isinstance(batch, bytes | bytearray) else sum(len(part) for part in batch)
        if self._bytes and self._bytes + size > self._limit:
            self._next_connection()
        while len(self._pending) >= self._max_in_flight:
            self._pending.popleft().result()
        self._pending.append(
            self._client.stage_soon(
                request.query_id,
                request.batch_id,
                request.topic,
                request.partition,
                batch,
                writer=request.writer,
                attempt=request.attempt,
                sequence=sequence,
            )
        )
        self._bytes += size

    def stage_range(
        self, request: StageRequest, source: tuple[str, int], start: int, end: int, *, sequence: int
    ) -> dict[str, Any] | None:
        """Have the SPU stage the records [start, end) of its partition `source` itself (their
        bytes never come here); its reply (`batches`, `bytes`, `records` staged), or None when
        the caller must stage the bytes: an SPU that does not stage ranges (a cluster), or a
        range larger than one connection may stage."""
        if self._ranges_refused:
            return None
        for fresh in (False, True):
            try:
                reply: dict[str, Any] = self._client.stage_range(
                    request.query_id,
                    request.batch_id,
                    request.topic,
                    request.partition,
                    source,
                    start,
                    end,
                    writer=request.writer,
                    attempt=request.attempt,
                    sequence=sequence,
                )
            except SpuError as err:
                if err.code is ErrorCode.UNSUPPORTED_API:
                    self._ranges_refused = True
                    return None
                if err.code is not ErrorCode.TOO_MANY_REQUESTS:
                    raise
                if fresh or not self._bytes:
                    return None
                self._next_connection()
                continue
            self._bytes += int(reply["bytes"])
            return reply
        return None

    def finish(self) -> None:
        """Wait until every request sent was answered (raises the first failure)."""
        while self._pending:
            self._pending.popleft().result()

    def close(self) -> None:
        self._client.close()

    def _next_connection(self) -> None:
        self.finish()
        self._client.close()
        self._client = self._connect()
        self._bytes = 0
        self.connections += 1
