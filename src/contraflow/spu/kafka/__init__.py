"""The SPU's Kafka protocol listener: Kafka clients produce to and consume from the
same topics and partitions as contraflow's own clients (see docs/kafka.md)."""

from contraflow.spu.kafka.broker import Broker, KafkaSettings
from contraflow.spu.kafka.server import KafkaListener

__all__ = ["Broker", "KafkaListener", "KafkaSettings"]
