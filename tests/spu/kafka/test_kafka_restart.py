"""A group's committed offsets are the SPU's consumer offsets: they survive the SPU
being SIGKILLed and restarted (`contraflow spu run --kafka-addr` as a child process)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import TopicPartition
from kafka_harness import consume, consumer, create_topic, produce

from contraflow.spu.embedded import EmbeddedSpu


def test_committed_offsets_survive_a_sigkilled_spu(tmp_path: Path) -> None:
    values = [f"v{i}".encode() for i in range(40)]
    spu = EmbeddedSpu(tmp_path / "data", mode="process", kafka_addr="127.0.0.1:0")
    spu.start()
    try:
        assert spu.kafka_addr
        create_topic(spu.kafka_addr, "orders", partitions=2)
        produce(spu.kafka_addr, "orders", [(str(i).encode(), v) for i, v in enumerate(values)])
        first = consumer(spu.kafka_addr, "billing")
        first.subscribe(["orders"])
        seen = consume(first, 25)
        first.commit(asynchronous=False)
        committed = {
            tp.partition: tp.offset
            for tp in first.committed([TopicPartition("orders", p) for p in (0, 1)], timeout=10)
        }
        first.close()
    finally:
        spu.kill()

    restarted = EmbeddedSpu(tmp_path / "data", mode="process", kafka_addr="127.0.0.1:0")
    restarted.start()
    try:
        again = consumer(restarted.kafka_addr, "billing")
        after = {
            tp.partition: tp.offset
            for tp in again.committed([TopicPartition("orders", p) for p in (0, 1)], timeout=10)
        }
        assert after == committed and sum(after.values()) == 25
        again.subscribe(["orders"])
        rest = consume(again, len(values) - 25)
        again.close()
        assert sorted(m.value() for m in seen + rest) == sorted(values)
    finally:
        restarted.stop()
