"""Engine exceptions as the SPU protocol's errors, in one place."""

from __future__ import annotations

import logging

from contraflow.spu.protocol import ErrorCode, SpuError
from contraflow.spu.protocol.errors import wire_code

log = logging.getLogger(__name__)


def translate(err: Exception) -> SpuError:
    """The wire error for an engine exception; the message is kept word for word."""
    if isinstance(err, SpuError):
        return err
    code = wire_code(err)
    if code is None and isinstance(err, ValueError | TypeError):
        code = ErrorCode.INVALID_ARGUMENT  # a request's value the engine refused
    if code is None:
        log.exception("unexpected error", exc_info=err)
        return SpuError(ErrorCode.UNKNOWN, f"{type(err).__name__}: {err}")
    return SpuError(code, str(err))
