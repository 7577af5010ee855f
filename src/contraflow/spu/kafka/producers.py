"""Kafka's producer ids: InitProducerId hands out random 32-bit ids (unique across
restarts and across the SPUs of a cluster with high probability, never 0).

The sequence checks of Kafka's idempotent producers are the node's one table
(`node/idempotence/producers.py`), shared with the SPU's own producers: each log
batch carries its Kafka producer id and base sequence in its producer field
(`protocol/idempotence.py`), so an SPU that starts leading a partition rebuilds
the sequences from its own log and a producer's retry after a failover is still
recognised. A lone SPU keeps the sequences in memory only: after its restart the
first batch of a producer on a partition is accepted whatever its sequence.
"""

from __future__ import annotations

import secrets


class ProducerIds:
    def allocate(self) -> int:
        return secrets.randbits(32) or 1  # never 0: see protocol/idempotence.log_producer_field
