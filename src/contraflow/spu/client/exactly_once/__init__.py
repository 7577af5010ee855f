"""A client's side of exactly-once writing: a task's staging (`writer`: `BatchWriter`,
`StagedWork`, `commit_batch`) and the commits, aborts and ledger questions every client
sends, one path for a lone SPU and a cluster (`commits`)."""

from contraflow.spu.client.exactly_once.writer import BatchWriter, StagedWork, commit_batch

__all__ = ["BatchWriter", "StagedWork", "commit_batch"]
