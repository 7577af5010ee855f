"""Pre- and postprocessor chains: each stage's frames feed the next, per stream.

A chain never loses good frames to a bad one: a stage that fails on one frame
is recorded and the other frames go on; the call then raises `FrameErrors`
with the frames that made it through every stage and the errors on the way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from contraflow.codecs.errors import CodecError, FrameErrors
from contraflow.codecs.processors.processor import Processor


def _feed(step: Callable[[bytes], list[bytes]], frames: list[bytes], errors: list[CodecError]) -> list[bytes]:
    """Run one stage over every frame, collecting its errors instead of stopping at the first."""
    out: list[bytes] = []
    for frame in frames:
        try:
            produced = step(frame)
        except FrameErrors as err:
            produced = err.frames
            errors.extend(err.errors)
        except CodecError as err:
            if err.data is None:  # a per-frame stage failed on this frame: keep it for the err event
                err.data = bytes(frame)
            errors.append(err)
            continue
        if len(frames) == 1:
            return produced
        out.extend(produced)
    return out


class Chain:
    """An ordered list of stages; `process` and `finish` as on a single stage."""

    kind: ClassVar[str]

    def __init__(self, stages: Sequence[Processor]) -> None:
        self.stages = tuple(stages)

    @property
    def names(self) -> list[str]:
        return [stage.name for stage in self.stages]

    def process(self, data: bytes) -> list[bytes]:
        """The frames `data` completes, after every stage. Raises `FrameErrors` if any frame failed."""
        frames = [data]
        errors: list[CodecError] = []
        for stage in self.stages:
            frames = _feed(stage.process, frames, errors)
            if not frames:
                break
        if errors:
            raise FrameErrors(frames, errors)
        return frames

    def finish(self) -> list[bytes]:
        """End of stream: flush every stage in order, passing each flush through the later stages."""
        frames: list[bytes] = []
        errors: list[CodecError] = []
        for stage in self.stages:
            if frames:
                frames = _feed(stage.process, frames, errors)
            try:
                frames.extend(stage.finish())
            except FrameErrors as err:
                frames.extend(err.frames)
                errors.extend(err.errors)
            except CodecError as err:
                errors.append(err)
        if errors:
            raise FrameErrors(frames, errors)
        return frames

    def __repr__(self) -> str:
        return f"<{self.kind}s {self.names}>"


class Preprocessors(Chain):
    """Raw bytes of one stream (a TCP connection, a file) -> frames for the codec."""

    kind = "preprocessor"


class Postprocessors(Chain):
    """Encoded frames -> bytes for the wire, for one outgoing stream."""

    kind = "postprocessor"
