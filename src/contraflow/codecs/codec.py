"""What every codec is: bytes in, a plain Python value out, and back.

Values are what a pipeline sees: dict, list, str, int, float, bool, None, and
`bytes` for binary data. A codec instance belongs to one connector (or one
Spark worker) and is not shared across threads, so codecs may keep reusable
buffers and precompiled settings on `self` instead of looking config up per call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Final

from contraflow.codecs.config import Configured, OptionsT
from contraflow.codecs.errors import CodecError


class _NoEvent:
    """The type of `NO_EVENT`."""

    def __repr__(self) -> str:
        return "NO_EVENT"

    def __reduce__(self) -> str:
        return "NO_EVENT"  # unpickles as the module's one instance


NO_EVENT: Final = _NoEvent()
"""What `decode` returns for a frame that carries no event (an influx comment line), as Tremor's `None`."""


class Codec(Configured[OptionsT], ABC):
    """Decodes one frame into a value and encodes one value into one frame."""

    kind = "codec"
    mime_types: ClassVar[tuple[str, ...]] = ()
    """Content types this codec speaks, for connectors (HTTP) that negotiate by `Content-Type`."""

    @abstractmethod
    def decode(self, data: bytes) -> Any:
        """The value in `data` (or `NO_EVENT`); raises `CodecError` (never anything else) on bad input."""

    def decode_batch(self, frames: Sequence[bytes]) -> list[Any]:
        """What `decode` makes of each frame, in order: its value, `NO_EVENT`, or the exception it
        raised (an instance in the frame's place). The runtime hands a pull's frames over in one
        call, so a codec with a faster way through many frames (avro) overrides this."""
        return [self.decoded_or_error(frame) for frame in frames]

    def decoded_or_error(self, frame: bytes) -> Any:
        """`decode(frame)`, or the error it raised; a `TypeError`/`ValueError` of a codec that breaks
        its contract is kept as well, so bad data never stops a batch."""
        try:
            return self.decode(frame)
        except (CodecError, TypeError, ValueError) as err:
            return err

    @abstractmethod
    def encode(self, value: Any) -> bytes:
        """The wire form of `value`; raises `CodecError` for values this codec cannot represent."""

    def __repr__(self) -> str:
        return f"<codec {self.name}>"
