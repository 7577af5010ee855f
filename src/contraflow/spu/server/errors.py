"""Engine exceptions as wire errors, in one place."""

from __future__ import annotations

import logging

from contraflow.errors import UserError
from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.protocol.batch import CorruptBatchError
from contraflow.spu.storage import errors as storage_errors

log = logging.getLogger(__name__)

_ERRORS: list[tuple[type[BaseException], ErrorCode]] = [
    (storage_errors.TopicNotFoundError, ErrorCode.UNKNOWN_TOPIC),
    (storage_errors.TopicExistsError, ErrorCode.TOPIC_EXISTS),
    (storage_errors.PartitionNotFoundError, ErrorCode.UNKNOWN_PARTITION),
    (storage_errors.OffsetOutOfRangeError, ErrorCode.OFFSET_OUT_OF_RANGE),
    (storage_errors.InvalidBatchError, ErrorCode.CORRUPT_BATCH),
    (CorruptBatchError, ErrorCode.CORRUPT_BATCH),
    (UserError, ErrorCode.INVALID_ARGUMENT),
    (ValueError, ErrorCode.INVALID_ARGUMENT),
    (TypeError, ErrorCode.INVALID_ARGUMENT),
    (storage_errors.StorageError, ErrorCode.STORAGE_ERROR),
    (OSError, ErrorCode.STORAGE_ERROR),
]


def translate(err: Exception) -> SpuError:
    """The wire error for an engine exception; the message is kept word for word."""
    if isinstance(err, SpuError):
        return err
    for kind, code in _ERRORS:
        if isinstance(err, kind):
            return SpuError(code, str(err))
    log.exception("unexpected error", exc_info=err)
    return SpuError(ErrorCode.UNKNOWN, f"{type(err).__name__}: {err}")
