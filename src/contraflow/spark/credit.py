"""Back-pressure credit a runtime publishes on the SPU for a streaming query.

The credit is the number of records the query's next micro-batch may read from
a topic; zero stops reading, no credit published means unlimited. It is kept
in the SPU's durable consumer-offset store under a reserved consumer name, so
Spark's driver-side Python process (which shares no memory with the runtime)
reads the value the runtime wrote.
"""

from __future__ import annotations

from contraflow.spu.api import LogClient

CREDIT_PREFIX = "__credit__/"
NO_CREDIT_LIMIT = -1


def _name(consumer: str) -> str:
    return CREDIT_PREFIX + consumer


def publish_credit(client: LogClient, consumer: str, topic: str, credit: int | None) -> None:
    """Allow `credit` more records (None lifts the limit) for `consumer` reading `topic`."""
    client.commit_offset(_name(consumer), topic, 0, NO_CREDIT_LIMIT if credit is None else max(0, credit))


def read_credit(client: LogClient, consumer: str, topic: str) -> int | None:
    """The published credit, or None when none is published or the limit was lifted."""
    value = client.fetch_offset(_name(consumer), topic, 0)
    return None if value is None or value == NO_CREDIT_LIMIT else value
