"""The leader's side of one partition: follower progress, the high watermark, the
in-sync set, and produces waiting for their batch to be committed.

The high watermark is the lowest log end among the in-sync replicas, where the
leader's own end counts only what its flush policy made durable and a
follower's end is what it reported in its last fetch (it fetches from its own
log end, after appending per its flush policy). It never moves backwards, and
never stops inside an exactly-once commit (`clamp`): readers see a partition's
commit whole or not at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.storage.partition import Partition


@dataclass
class FollowerProgress:
    offset: int = -1  # the log end it reported last (-1: not heard from in this epoch)
    caught_up_at: float = field(default_factory=time.monotonic)  # it was at the leader's end then
    end_at_last_fetch: int = 0  # the leader's log end when it answered its previous fetch
    last_fetch_at: float = field(default_factory=time.monotonic)


class LeaderState:
    """Lives on the server's event loop; one per partition this SPU leads (one epoch)."""

    def __init__(
        self,
        spu_id: int,
        partition: Partition,
        epoch: int,
        isr: list[int],
        epoch_start: int,
        clamp: Callable[[int], int] = lambda offset: offset,
    ) -> None:
        self.spu_id = spu_id
        self._clamp = clamp  # moves a candidate high watermark out of unfinished commits
        self.partition = partition
        self.epoch = epoch
        self.epoch_start = epoch_start  # first offset written in this epoch
        self.isr = set(isr)
        self.followers: dict[int, FollowerProgress] = {}
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.pending_isr: set[int] | None = None  # an in-sync change sent to the controller

    def progress(self, replica: int) -> FollowerProgress:
        found = self.followers.get(replica)
        if found is None:
            found = self.followers[replica] = FollowerProgress()
        return found

    def follower_fetched(self, replica: int, offset: int) -> None:
        """A fetch from `offset` says the follower holds everything below it."""
        now = time.monotonic()
        progress = self.progress(replica)
        leo = self.partition.log_end_offset
        if offset >= leo:
            progress.caught_up_at = now
        elif offset >= progress.end_at_last_fetch:
            progress.caught_up_at = progress.last_fetch_at
        progress.offset = offset
        progress.last_fetch_at = now
        progress.end_at_last_fetch = leo

    def wants_to_join(self, replica: int, lag_max_s: float) -> bool:
        """An out-of-sync follower rejoins once it holds everything committed in this epoch
        and is still fetching (a dead one's last position must not bring it back)."""
        progress = self.followers.get(replica)
        return (
            replica not in self.isr
            and progress is not None
            and time.monotonic() - progress.caught_up_at <= lag_max_s / 2
            and progress.offset >= max(self.partition.high_watermark, self.epoch_start)
        )

    def laggards(self, lag_max_s: float) -> set[int]:
        now = time.monotonic()
        return {r for r in self.isr if r != self.spu_id and now - self.progress(r).caught_up_at > lag_max_s}

    def update_high_watermark(self) -> bool:
        """Recompute from the in-sync set; True if it moved (waiters are released)."""
        ends = [self.partition.policy_end]
        for replica in self.isr:
            if replica != self.spu_id:
                ends.append(self.progress(replica).offset)
        candidate = self._clamp(min(ends))
        if candidate <= self.partition.high_watermark:
            return False
        self.partition.set_high_watermark(candidate, persist=False)
        hw = self.partition.high_watermark
        still: list[tuple[int, asyncio.Future[None]]] = []
        for end, future in self._waiters:
            if end <= hw:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((end, future))
        self._waiters = still
        return True

    async def wait_committed(self, end: int, timeout_s: float) -> None:
        """Return once offsets below `end` are committed; NOT_LEADER if leadership is lost."""
        if self.partition.high_watermark >= end:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((end, future))
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for, which may swallow a cancel (3.11)
                await future
        except TimeoutError:
            raise SpuError(
                ErrorCode.TIMEOUT,
                f"{self.partition.topic}/{self.partition.number}: not replicated to the in-sync "
                f"replicas within {timeout_s:.0f}s",
            ) from None

    def resign(self, why: str) -> None:
        """Leadership is gone: every waiting produce fails (its batch may or may not commit)."""
        error = SpuError(ErrorCode.NOT_LEADER, why)
        for _, future in self._waiters:
            if not future.done():
                future.set_exception(error)
        self._waiters = []
