"""Back-pressure credit a runtime publishes on the SPU for a streaming query.

The credit is the number of records the query's next micro-batch may read from
a topic; zero stops reading, no credit published means unlimited. It is an SPU
control value, so Spark's driver-side Python process (which shares no memory
with the runtime) reads what the runtime wrote.
"""

from __future__ import annotations

from typing import Any


def credit_name(consumer: str, topic: str) -> str:
    return f"credit/{consumer}/{topic}"


def publish_credit(spu: Any, consumer: str, topic: str, credit: int | None) -> None:
    """Allow `credit` records per micro-batch (None lifts the limit) for `consumer` reading `topic`."""
    spu.set_control(credit_name(consumer, topic), None if credit is None else max(0, int(credit)))


def read_credit(spu: Any, consumer: str, topic: str) -> int | None:
    """The published credit, or None when there is no limit."""
    value = spu.get_control(credit_name(consumer, topic))
    return None if value is None else int(value)
