"""The runtime's way of appending (a batching `AsyncProducer` and `produce_encoded` of
pre-built batches) against a cluster: numbered like `produce`, so retries through a
leader's SIGKILL store every record once."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.spu.cluster_harness import local_cluster, partition_state, replica_log

from contraflow.spu.client import AsyncProducer, AsyncSpuClient, ProducerSettings
from contraflow.spu.protocol import Acks
from contraflow.spu.protocol.batch import encode_batch
from contraflow.spu.protocol.idempotence import split_producer_field
from contraflow.spu.protocol.topics import TopicConfig

RECORDS = 3000


def test_encoded_batches_and_producer_batches_survive_a_leader_sigkill_exactly_once(tmp_path: Path) -> None:
    async def write(bootstrap: str, kill: asyncio.Event) -> None:
        async with AsyncSpuClient(bootstrap) as client:
            config = await client.replicated_config(TopicConfig(partitions=1))
            assert (config.replication_factor, config.min_in_sync_replicas) == (3, 2)
            await client.create_topic("channel", config)
            producer = AsyncProducer(client, ProducerSettings(acks=Acks.COMMITTED, linger_ms=1))
            for i in range(0, RECORDS, 10):
                if i == RECORDS // 3:
                    kill.set()
                    await asyncio.sleep(0)
                if i % 20:
                    for j in range(i, i + 10):
                        await producer.send("channel", 0, f"{j}".encode())
                else:
                    batch = encode_batch([f"{j}".encode() for j in range(i, i + 10)])
                    await producer.flush()  # keep the records in order
                    await client.produce_encoded("channel", 0, batch, Acks.COMMITTED)
            await producer.flush()

    with local_cluster(tmp_path) as cluster:

        async def main() -> None:
            kill = asyncio.Event()
            writer = asyncio.create_task(write(cluster.bootstrap, kill))
            await asyncio.wait(
                [writer, asyncio.create_task(kill.wait())], return_when=asyncio.FIRST_COMPLETED
            )
            assert not writer.done(), writer.exception()
            leader = (await asyncio.to_thread(partition_state, cluster, "channel"))[0]
            await asyncio.to_thread(cluster.signal, f"spu-{leader}", signal.SIGKILL)
            await writer

        asyncio.run(main())
        new_leader = partition_state(cluster, "channel")[0]
        log = replica_log(tmp_path / f"spu-{new_leader}", "channel")
        assert [int(v) for _, _, v in log] == list(range(RECORDS))
        producers = {split_producer_field(h) for h in _producer_fields(tmp_path / f"spu-{new_leader}")}
        assert None not in producers, "every batch is numbered"


def _producer_fields(data_dir: Path) -> list[int]:
    from contraflow.spu.protocol.batch import BatchHeader
    from contraflow.spu.storage.store import Store

    store = Store(data_dir, read_only=True)
    try:
        part = store.partition("channel", 0)
        result = part.read(0, 1 << 24, isolation="uncommitted")
        return [BatchHeader.parse(view).producer_id for view in result.batches]
    finally:
        store.close()
