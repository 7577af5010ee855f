"""What every pre- and postprocessor is: bytes in, zero or more frames out.

Preprocessors sit between a connector's raw byte stream and the codec (split
lines, strip length prefixes, decompress); postprocessors between the codec and
the wire. One instance serves one stream (one TCP connection, one file), so
framing state such as a half-received line lives on the instance.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from contraflow.codecs.config import Configured, OptionsT
from contraflow.codecs.errors import CodecError


class Processor(Configured[OptionsT], ABC):
    """One stage of a pre- or postprocessor chain."""

    @abstractmethod
    def process(self, data: bytes) -> list[bytes]:
        """The frames `data` completes. Raises `CodecError`, or `FrameErrors` when only some failed."""

    def finish(self) -> list[bytes]:
        """End of stream: flush what is still buffered (most stages buffer nothing)."""
        return []

    def error(self, reason: str) -> CodecError:
        """A `CodecError` naming this stage, for bad data."""
        return CodecError(self.name, reason, kind=self.kind)

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name}>"


class Preprocessor(Processor[OptionsT]):
    kind = "preprocessor"


class Postprocessor(Processor[OptionsT]):
    kind = "postprocessor"
