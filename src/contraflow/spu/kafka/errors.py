"""Kafka error codes and how the SPU's own exceptions map onto them."""

from __future__ import annotations

import enum
import logging

from contraflow.spu.protocol import ErrorCode as SpuErrorCode
from contraflow.spu.protocol import SpuError
from contraflow.spu.protocol.errors import InvalidTopicNameError, wire_code

log = logging.getLogger(__name__)


class KafkaErrorCode(enum.IntEnum):
    """The subset of Kafka's error codes this listener answers with (numbers are Kafka's)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    NOT_ENOUGH_REPLICAS = 19
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REQUIRED_ACKS = 21
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_CONFIG = 40
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    UNSUPPORTED_COMPRESSION_TYPE = 76


class KafkaError(Exception):
    """An error to answer with; the message goes to the log (and to fields that carry one)."""

    def __init__(self, code: KafkaErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


_SPU_CODES: dict[SpuErrorCode, KafkaErrorCode] = {
    SpuErrorCode.UNKNOWN_TOPIC: KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    SpuErrorCode.UNKNOWN_PARTITION: KafkaErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    SpuErrorCode.OFFSET_OUT_OF_RANGE: KafkaErrorCode.OFFSET_OUT_OF_RANGE,
    SpuErrorCode.CORRUPT_BATCH: KafkaErrorCode.CORRUPT_MESSAGE,
    SpuErrorCode.TOPIC_EXISTS: KafkaErrorCode.TOPIC_ALREADY_EXISTS,
    SpuErrorCode.STORAGE_ERROR: KafkaErrorCode.KAFKA_STORAGE_ERROR,
    SpuErrorCode.DISK_FULL: KafkaErrorCode.KAFKA_STORAGE_ERROR,
    # a cluster (kafka/topology.py): the client re-reads the metadata and retries
    SpuErrorCode.NOT_LEADER: KafkaErrorCode.NOT_LEADER_OR_FOLLOWER,
    SpuErrorCode.FENCED_LEADER_EPOCH: KafkaErrorCode.NOT_LEADER_OR_FOLLOWER,
    SpuErrorCode.SHUTTING_DOWN: KafkaErrorCode.NOT_LEADER_OR_FOLLOWER,
    SpuErrorCode.NOT_ENOUGH_REPLICAS: KafkaErrorCode.NOT_ENOUGH_REPLICAS,
    SpuErrorCode.TIMEOUT: KafkaErrorCode.REQUEST_TIMED_OUT,
    SpuErrorCode.NO_CONTROLLER: KafkaErrorCode.REQUEST_TIMED_OUT,
    SpuErrorCode.OUT_OF_ORDER_SEQUENCE: KafkaErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    SpuErrorCode.INVALID_ARGUMENT: KafkaErrorCode.INVALID_REQUEST,  # a user's mistake
}


def to_kafka_error(err: Exception) -> KafkaError:
    """The Kafka error for an exception raised while serving a request."""
    if isinstance(err, KafkaError):
        return err
    if isinstance(err, InvalidTopicNameError):
        return KafkaError(KafkaErrorCode.INVALID_TOPIC_EXCEPTION, str(err))  # Kafka has a code of its own
    spu_code = err.code if isinstance(err, SpuError) else wire_code(err)
    if spu_code is not None:
        return KafkaError(_SPU_CODES.get(spu_code, KafkaErrorCode.UNKNOWN_SERVER_ERROR), str(err))
    log.exception("unexpected error serving a Kafka request", exc_info=err)
    return KafkaError(KafkaErrorCode.UNKNOWN_SERVER_ERROR, f"{type(err).__name__}: {err}")


def error_code_of(err: Exception) -> int:
    return int(to_kafka_error(err).code)
