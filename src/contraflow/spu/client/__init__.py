"""Clients of an SPU server: synchronous `SpuClient` (a `LogClient`), `AsyncSpuClient`, producers."""

from contraflow.spu.client.aio import AsyncSpuClient, StreamFetch
from contraflow.spu.client.exactly_once.writer import BatchWriter, StagedWork, commit_batch
from contraflow.spu.client.producer import AsyncProducer, Producer, ProducerSettings
from contraflow.spu.client.sync import SpuClient
from contraflow.spu.rpc.client import RetryPolicy

__all__ = [
    "BatchWriter",
    "StagedWork",
    "commit_batch",
    "AsyncProducer",
    "AsyncSpuClient",
    "Producer",
    "ProducerSettings",
    "RetryPolicy",
    "SpuClient",
    "StreamFetch",
]
