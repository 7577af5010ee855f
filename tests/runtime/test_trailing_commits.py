"""A bulk sink's offset commits trail its deliveries (`sink.TrailingCommits`)."""

from __future__ import annotations

import asyncio

import pytest

from contraflow.runtime.sink import TrailingCommits


class SlowCommits:
    """Offset commits that each wait until the test releases them, recording what was committed."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.committed: list[int] = []
        self.release = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self.fail_at: int | None = None

    async def commit(self, offset: int) -> None:
        self.started.append(offset)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.release.wait()
            if offset == self.fail_at:
                raise ConnectionError(f"commit of {offset} failed")
            self.committed.append(offset)
        finally:
            self.in_flight -= 1


def test_deliveries_go_on_while_a_commit_runs_and_the_newest_offset_is_committed_last() -> None:
    async def main() -> SlowCommits:
        commits = SlowCommits()
        trailing = TrailingCommits(commits.commit)
        trailing.advance(10)
        await asyncio.sleep(0)  # the first commit starts and waits
        for offset in (20, 30, 40):  # delivered meanwhile: only the newest is worth committing
            trailing.advance(offset)
        assert commits.started == [10]
        commits.release.set()
        await trailing.flush()
        return commits

    commits = asyncio.run(main())
    assert commits.committed == [10, 40]  # in order, never ahead of a delivery
    assert commits.most_in_flight == 1


def test_a_failed_commit_is_raised_by_the_next_advance_or_by_flush() -> None:
    async def main() -> None:
        commits = SlowCommits()
        commits.fail_at = 10
        commits.release.set()
        trailing = TrailingCommits(commits.commit)
        trailing.advance(10)
        await asyncio.sleep(0.01)
        with pytest.raises(ConnectionError):
            trailing.advance(20)
        trailing.advance(30)
        commits.fail_at = 30
        with pytest.raises(ConnectionError):
            await trailing.flush()
        assert commits.committed == []

    asyncio.run(main())
