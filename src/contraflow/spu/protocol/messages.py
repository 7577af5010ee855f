"""The SPU's requests: API keys, versions and the typed fields of every request.

A request's metadata map is checked field by field against its dataclass here,
once, so handlers work with typed values and a fuzzer can only ever produce a
MALFORMED_REQUEST answer, never an exception inside a handler.
Responses are plain maps: `error` (ErrorCode), `message`, plus the fields
documented per API in docs/spu-server.md.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

from contraflow.spu.protocol.errors import ErrorCode, SpuError


class ApiKey(IntEnum):
    API_VERSIONS = 0
    PRODUCE = 1
    FETCH = 2
    STREAM_FETCH = 3
    STREAM_CREDIT = 4
    STREAM_CLOSE = 5
    LIST_OFFSETS = 6
    OFFSET_COMMIT = 7
    OFFSET_FETCH = 8
    CREATE_TOPIC = 9
    DELETE_TOPIC = 10
    LIST_TOPICS = 11
    DESCRIBE_TOPIC = 12
    TXN_STAGE = 13
    TXN_COMMIT = 14
    TXN_ABORT = 15
    TXN_LEDGER = 16
    CONTROL_SET = 17
    CONTROL_GET = 18
    AUTHENTICATE = 19  # the handshake an SPU started with a token expects first
    METADATA = 20  # cluster: SPUs, topics, each partition's leader (any SPU or the controller answers)
    REPLICA_FETCH = 21  # private port: a follower copies its leader's log
    OFFSET_FOR_EPOCH = 22  # private port: where an epoch ends in the leader's log (truncation)
    SC_HEARTBEAT = 23  # controller port: an SPU registers and stays alive
    SC_ALTER_ISR = 24  # controller port: a leader changes its in-sync set
    REPLICA_STAGE = 25  # private port: a leader copies exactly-once staging to its in-sync followers
    TXN_STAGE_RANGE = 26  # stage a range of another partition of this SPU by reference (range_stage)


class Acks(IntEnum):
    """When a produce is answered: never, once appended, or once committed (durable)."""

    NONE = 0
    LEADER = 1
    COMMITTED = 2


ISOLATIONS = ("committed", "uncommitted")
OFFSET_SPECS = ("earliest", "latest", "timestamp")


@dataclass(frozen=True, slots=True)
class ApiVersionsRequest:
    pass


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """Payload: one or more encoded record batches for one partition (an idempotent
    producer's id and sequence travel in each batch's header: protocol/idempotence.py)."""

    topic: str
    partition: int
    acks: int = Acks.LEADER


@dataclass(frozen=True, slots=True)
class FetchRequest:
    topic: str
    partition: int
    offset: int
    max_bytes: int = 1024 * 1024
    isolation: str = "uncommitted"


@dataclass(frozen=True, slots=True)
class StreamFetchRequest:
    """Opens a push stream; its id is the request's correlation id."""

    topic: str
    partition: int
    offset: int
    max_bytes: int = 256 * 1024  # per pushed frame
    credit_bytes: int = 1024 * 1024  # initial credit
    isolation: str = "uncommitted"


@dataclass(frozen=True, slots=True)
class StreamCreditRequest:
    """Fire-and-forget: adds credit to an open stream; the server sends no response."""

    stream_id: int
    credit_bytes: int


@dataclass(frozen=True, slots=True)
class StreamCloseRequest:
    stream_id: int


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    topic: str
    partition: int
    spec: str = "latest"
    timestamp: int | None = None
    isolation: str = "uncommitted"


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    consumer: str
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    consumer: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    """`config` is `TopicConfig.to_dict()` (missing keys take their defaults)."""

    name: str
    config: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeleteTopicRequest:
    name: str


@dataclass(frozen=True, slots=True)
class ListTopicsRequest:
    pass


@dataclass(frozen=True, slots=True)
class DescribeTopicRequest:
    name: str


@dataclass(frozen=True, slots=True)
class TxnStageRequest:
    """Payload: record batches staged for (producer_id, batch_id, topic, partition).

    `writer`/`attempt` let a retried task replace what its failed attempt staged:
    staging under a writer with a new attempt number discards that writer's
    earlier staged batches first. `sequence` (increasing per writer attempt)
    makes a resent stage request (a retry after a lost answer) a no-op; it is
    compared with the writer's last one for the same partition.
    """

    producer_id: str
    batch_id: int
    topic: str
    partition: int
    writer: str = ""
    attempt: int = 0
    sequence: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnStageRangeRequest(TxnStageRequest):
    """No payload: the records of [start, end) of `source_topic`/`source_partition`, staged
    as a TXN_STAGE would stage them (`protocol.range_stage`)."""

    source_topic: str
    source_partition: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class TxnCommitRequest:
    """`expected_batches`: how many record batches the writer staged; a mismatch (staging
    lost to an SPU restart or timeout) fails the commit instead of committing a part.
    `partitions`: `[[topic, partition, batches], ...]`, the partitions this SPU leads and
    how many batches were staged to each; a lone SPU commits them all atomically, a
    cluster SPU each one (a commit naming none is a lone SPU's: all it staged)."""

    producer_id: str
    batch_id: int
    expected_batches: int | None = None
    partitions: list[list[Any]] | None = None


@dataclass(frozen=True, slots=True)
class TxnAbortRequest:
    producer_id: str
    batch_id: int


@dataclass(frozen=True, slots=True)
class TxnLedgerRequest:
    producer_id: str
    batch_id: int


@dataclass(frozen=True, slots=True)
class ControlSetRequest:
    """Publish a small JSON value under a name (None removes it): credits, breaker state."""

    name: str
    value: int | str | dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ControlGetRequest:
    name: str


@dataclass(frozen=True, slots=True)
class AuthenticateRequest:
    token: str


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    pass


@dataclass(frozen=True, slots=True)
class ReplicaFetchRequest:
    """A follower's fetch: `offset` is its log end (durable per the flush policy), which
    tells the leader how far it has copied; `leader_epoch` is the epoch it follows."""

    topic: str
    partition: int
    offset: int
    replica_id: int
    leader_epoch: int
    max_bytes: int = 1024 * 1024
    max_wait_ms: int = 500


@dataclass(frozen=True, slots=True)
class OffsetForEpochRequest:
    """Answer: the largest epoch <= `epoch` in the leader's history and where it ends."""

    topic: str
    partition: int
    epoch: int
    leader_epoch: int


DEFAULT_SESSION_TIMEOUT_S = 2.0
"""How long an SPU may go without a heartbeat before the controller counts it gone."""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """`session`: random per SPU process start (a restart is a new session);
    `partitions`: [[topic, partition, log start, log end, high watermark, epoch]] of its replicas."""

    spu_id: int
    session: str
    public_addr: str
    private_addr: str
    partitions: list[list[Any]] = dataclasses.field(default_factory=list)
    kafka_addr: str = ""  # its Kafka listener, if it has one (Kafka clients' Metadata lists it)


@dataclass(frozen=True, slots=True)
class AlterIsrRequest:
    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    isr: list[int]


REQUEST_TYPES: dict[ApiKey, type] = {
    ApiKey.API_VERSIONS: ApiVersionsRequest,
    ApiKey.PRODUCE: ProduceRequest,
    ApiKey.FETCH: FetchRequest,
    ApiKey.STREAM_FETCH: StreamFetchRequest,
    ApiKey.STREAM_CREDIT: StreamCreditRequest,
    ApiKey.STREAM_CLOSE: StreamCloseRequest,
    ApiKey.LIST_OFFSETS: ListOffsetsRequest,
    ApiKey.OFFSET_COMMIT: OffsetCommitRequest,
    ApiKey.OFFSET_FETCH: OffsetFetchRequest,
    ApiKey.CREATE_TOPIC: CreateTopicRequest,
    ApiKey.DELETE_TOPIC: DeleteTopicRequest,
    ApiKey.LIST_TOPICS: ListTopicsRequest,
    ApiKey.DESCRIBE_TOPIC: DescribeTopicRequest,
    ApiKey.TXN_STAGE: TxnStageRequest,
    ApiKey.TXN_COMMIT: TxnCommitRequest,
    ApiKey.TXN_ABORT: TxnAbortRequest,
    ApiKey.TXN_LEDGER: TxnLedgerRequest,
    ApiKey.CONTROL_SET: ControlSetRequest,
    ApiKey.CONTROL_GET: ControlGetRequest,
    ApiKey.AUTHENTICATE: AuthenticateRequest,
    ApiKey.METADATA: MetadataRequest,
    ApiKey.REPLICA_FETCH: ReplicaFetchRequest,
    ApiKey.OFFSET_FOR_EPOCH: OffsetForEpochRequest,
    ApiKey.SC_HEARTBEAT: HeartbeatRequest,
    ApiKey.SC_ALTER_ISR: AlterIsrRequest,
    ApiKey.REPLICA_STAGE: TxnStageRequest,  # the client's stage request, as the leader got it
    ApiKey.TXN_STAGE_RANGE: TxnStageRangeRequest,
}

# Supported (min, max) version per API. Version 0 is the only one so far.
API_VERSIONS: dict[ApiKey, tuple[int, int]] = {key: (0, 0) for key in ApiKey}

T = TypeVar("T")
_MAX_INT = 2**63 - 1


def _type_ok(value: Any, hint: Any) -> bool:
    """A deliberately small type checker for the few field types requests use."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is Any:
        return True
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) and -_MAX_INT <= value <= _MAX_INT
    if hint is str:
        return isinstance(value, str)
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_type_ok(v, item) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) for k in value)
    raise TypeError(f"unsupported request field type {hint!r}")


_HINTS: dict[type, dict[str, Any]] = {cls: typing.get_type_hints(cls) for cls in REQUEST_TYPES.values()}


def parse_request(cls: type[T], meta: dict[str, Any]) -> T:
    """Build a typed request from its metadata map, or raise MALFORMED_REQUEST saying why."""
    hints = _HINTS[cls]
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name in meta:
            value = meta[field.name]
            if not _type_ok(value, hints[field.name]):
                raise SpuError(
                    ErrorCode.MALFORMED_REQUEST,
                    f"field {field.name!r} must be {hints[field.name]}, got {type(value).__name__}",
                )
            kwargs[field.name] = value
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise SpuError(ErrorCode.MALFORMED_REQUEST, f"missing field {field.name!r}")
    unknown = set(meta) - {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if unknown:
        raise SpuError(ErrorCode.MALFORMED_REQUEST, f"unknown fields {sorted(unknown)}")
    return cls(**kwargs)


def check_isolation(isolation: str) -> None:
    if isolation not in ISOLATIONS:
        raise SpuError(ErrorCode.INVALID_ARGUMENT, f"isolation must be one of {', '.join(ISOLATIONS)}")
