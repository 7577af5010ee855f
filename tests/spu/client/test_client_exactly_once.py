"""A Spark-shaped micro-batch written exactly once: task retries, replays, a lost staging."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.spu.spu_harness import running_spu

from contraflow.spu.client import SpuClient
from contraflow.spu.client.exactly_once.writer import BatchWriter, StagedWork, commit_batch
from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.storage import TopicConfig


def run_tasks(
    client: SpuClient, batch_id: int, rows: dict[int, list[bytes]], fail_first: bool
) -> list[StagedWork]:
    """One writer per Spark partition; optionally task 0 dies after staging half its rows."""
    work = []
    for task, values in rows.items():
        if fail_first and task == 0:
            dead = BatchWriter(client, "query", batch_id, writer=f"task-{task}", attempt=0)
            dead.write("out", task % 2, values[:1])  # staged, then the executor is lost
        attempt = 1 if fail_first and task == 0 else 0
        writer = BatchWriter(client, "query", batch_id, writer=f"task-{task}", attempt=attempt)
        for value in values:
            writer.write("out", task % 2, [value])
        work.append(writer.done())
    return work


def records(client: SpuClient) -> list[bytes]:
    return sorted(r.value for p in (0, 1) for b in client.fetch("out", p, 0).batches for r in b.records())


def test_retried_task_and_replayed_batch_write_each_record_once(tmp_path: Path) -> None:
    rows = {0: [b"a", b"b"], 1: [b"c"], 2: [b"d", b"e"]}
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        client.create_topic("out", TopicConfig(partitions=2))
        ends = commit_batch(client, "query", 0, run_tasks(client, 0, rows, fail_first=True))
        assert ends == {("out", 0): 4, ("out", 1): 1}
        assert records(client) == [b"a", b"b", b"c", b"d", b"e"]
        replay = run_tasks(client, 0, rows, fail_first=False)  # Spark re-runs batch 0 after a crash
        assert all(w.batches == 0 for w in replay)
        assert commit_batch(client, "query", 0, replay) == ends
        assert records(client) == [b"a", b"b", b"c", b"d", b"e"]


def test_staging_lost_to_a_restart_fails_the_commit_and_the_replay_succeeds(tmp_path: Path) -> None:
    rows = {0: [b"x"], 1: [b"y"]}
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        client.create_topic("out", TopicConfig(partitions=2))
        work = run_tasks(client, 7, rows, fail_first=False)
    with running_spu(tmp_path / "d") as spu, SpuClient(spu.addr) as client:
        with pytest.raises(SpuError) as err:
            commit_batch(client, "query", 7, work)
        assert err.value.code == ErrorCode.UNKNOWN_TRANSACTION
        assert records(client) == []
        commit_batch(client, "query", 7, run_tasks(client, 7, rows, fail_first=False))
        assert records(client) == [b"x", b"y"]
