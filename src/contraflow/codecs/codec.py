"""What every codec is: bytes in, a plain Python value out, and back.

Values are what a pipeline sees: dict, list, str, int, float, bool, None, and
`bytes` for binary data. A codec instance belongs to one connector (or one
Spark worker) and is not shared across threads, so codecs may keep reusable
buffers and precompiled settings on `self` instead of looking config up per call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Final

from contraflow.codecs.config import Configured, OptionsT


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

    @abstractmethod
    def encode(self, value: Any) -> bytes:
        """The wire form of `value`; raises `CodecError` for values this codec cannot represent."""

    def __repr__(self) -> str:
        return f"<codec {self.name}>"
