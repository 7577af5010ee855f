"""Error codes carried in every SPU response, and the exception a client raises for them.

The code is the contract between server and client; the message is for humans.
A client turns a non-zero code back into `SpuError` (a `UserError`), so the CLI
prints the server's message exactly as it would print the local engine's.
"""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path

from contraflow.errors import UserError
from contraflow.spu.protocol.batch import CorruptBatchError


class ErrorCode(IntEnum):
    """Documented response codes (see docs/spu-server.md). Never renumber: they are on the wire."""

    NONE = 0
    UNKNOWN = 1  # a bug on the server; the message says what happened
    MALFORMED_REQUEST = 2  # metadata is not a msgpack map or a field has the wrong type
    UNSUPPORTED_API = 3
    UNSUPPORTED_VERSION = 4
    FRAME_TOO_LARGE = 5
    TOO_MANY_REQUESTS = 6  # per-connection in-flight or staged-bytes limit reached
    INVALID_ARGUMENT = 7  # a well-formed request the engine refuses (bad name, negative offset...)
    UNKNOWN_TOPIC = 8
    TOPIC_EXISTS = 9
    UNKNOWN_PARTITION = 10
    OFFSET_OUT_OF_RANGE = 11
    CORRUPT_BATCH = 12  # produce/stage payload fails its CRC or framing
    STORAGE_ERROR = 13  # disk full, unreadable directory...
    UNKNOWN_TRANSACTION = 14  # commit of a batch id with nothing staged and no ledger entry
    STALE_TRANSACTION = 15  # batch id older than what the ledger still remembers
    UNKNOWN_STREAM = 16
    SHUTTING_DOWN = 17
    TIMEOUT = 18  # client side: no answer in time (never sent by the server)
    CONNECTION_ERROR = 19  # client side: connection lost and retries exhausted
    AUTHENTICATION_FAILED = 20  # no or a wrong token; the server closes the connection
    NOT_LEADER = 21  # cluster: this SPU does not lead the partition (now); refresh metadata
    NOT_ENOUGH_REPLICAS = 22  # cluster: fewer in-sync replicas than min_in_sync_replicas
    FENCED_LEADER_EPOCH = 23  # cluster: the request names an epoch older or newer than the leader's
    NO_CONTROLLER = 24  # cluster: the controller cannot be reached (admin waits for it)
    OUT_OF_ORDER_SEQUENCE = 25  # idempotent produce: a gap in the producer's sequence numbers
    DISK_FULL = 26  # the SPU's data directory is full: appends refused until space is freed


# Codes a client may retry after reconnecting; every other code is final.
RETRIABLE: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.TIMEOUT,
        ErrorCode.CONNECTION_ERROR,
        ErrorCode.TOO_MANY_REQUESTS,
        ErrorCode.NO_CONTROLLER,
    }
)
# Codes that mean "ask the cluster who leads now, then retry there" (a cluster client does).
REROUTE: frozenset[ErrorCode] = frozenset({ErrorCode.NOT_LEADER, ErrorCode.FENCED_LEADER_EPOCH})


class SpuError(UserError):
    """A non-zero response code, raised on the client (and inside the server to pick the code)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def retriable(self) -> bool:
        return self.code in RETRIABLE


class FramingError(Exception):
    """The byte stream cannot be split into frames any more: the connection must be closed
    (after a last answer with `code`, as the header's correlation id is still readable)."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.MALFORMED_REQUEST) -> None:
        super().__init__(message)
        self.code = code


# Topic-level mistakes: the engine raises them, both protocols answer them with their codes.


class TopicNotFoundError(UserError):
    def __init__(self, topic: str) -> None:
        super().__init__(f"unknown topic {topic!r}")
        self.topic = topic


class TopicExistsError(UserError):
    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} already exists")
        self.topic = topic


class InvalidTopicNameError(UserError):
    """A name outside Kafka's charset/length rules."""


class PartitionNotFoundError(UserError):
    def __init__(self, topic: str, partition: int, count: int) -> None:
        super().__init__(f"topic {topic!r} has no partition {partition} (it has {count}: 0..{count - 1})")


class OffsetOutOfRangeError(UserError):
    """An offset past the log end (an offset below the log start is answered from the start)."""


class InvalidBatchError(UserError):
    """A producer sent a batch that fails validation (CRC, framing)."""


class StorageError(Exception):
    """A storage failure that is not the user's fault (I/O, corruption); the engine raises it."""


class DiskFullError(StorageError):
    """The data directory's filesystem is full: appends are refused (and nothing half-written
    counts), reads, topic deletion and retention go on, and appends resume once space is freed."""

    def __init__(self, where: str, directory: Path) -> None:
        super().__init__(
            f"no space left on device: {where} refused, nothing of it written; "
            f"free space under {directory} (delete a topic, shorten retention, grow the disk) "
            "and appends resume; reads go on meanwhile"
        )


# The engine's exceptions as the SPU's wire codes, most specific first. Both
# protocols answer from this one table: the SPU's own (`rpc/errors.py`) and
# Kafka's (`kafka/errors.py`, through its table of SPU codes).
_WIRE_CODES: list[tuple[type[BaseException], ErrorCode]] = [
    (TopicNotFoundError, ErrorCode.UNKNOWN_TOPIC),
    (TopicExistsError, ErrorCode.TOPIC_EXISTS),
    (PartitionNotFoundError, ErrorCode.UNKNOWN_PARTITION),
    (OffsetOutOfRangeError, ErrorCode.OFFSET_OUT_OF_RANGE),
    (InvalidBatchError, ErrorCode.CORRUPT_BATCH),
    (CorruptBatchError, ErrorCode.CORRUPT_BATCH),
    (UserError, ErrorCode.INVALID_ARGUMENT),
    (DiskFullError, ErrorCode.DISK_FULL),
    (StorageError, ErrorCode.STORAGE_ERROR),
    (OSError, ErrorCode.STORAGE_ERROR),
]


def wire_code(err: BaseException) -> ErrorCode | None:
    """The wire code of an engine exception, or None for one the engine does not raise on purpose."""
    return next((code for kind, code in _WIRE_CODES if isinstance(err, kind)), None)
