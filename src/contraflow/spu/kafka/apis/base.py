"""What a Kafka API handler is: a parsed request header, the body to read, a response to write."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from contraflow.spu.kafka.broker import Broker
from contraflow.spu.kafka.wire import Reader, RequestHeader, Writer


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    header: RequestHeader
    body: Reader

    @property
    def version(self) -> int:
        return self.header.api_version


# None: no response at all (a produce with acks=0).
Handler = Callable[[Broker, KafkaRequest], Awaitable[Writer | None]]


@dataclass(frozen=True, slots=True)
class Api:
    key: ApiKey
    min_version: int
    max_version: int
    handler: Handler
    flexible_from: int | None = None  # first version with compact fields and tagged headers

    def is_flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from


THROTTLE_NONE = 0


def response(version: int, throttle_from: int) -> Writer:
    """A response body that starts with the throttle time if this version has one."""
    out = Writer()
    return out.int32(THROTTLE_NONE) if version >= throttle_from else out


NO_AUTHORIZED_OPERATIONS = -(1 << 31)  # Kafka's "not requested"
