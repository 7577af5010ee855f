"""Between a connector's bytes and channel records: preprocessors + codec in, codec + postprocessors out.

The runtime does this around every connector, one preprocessor chain per
incoming stream (a file, a TCP connection) so frames of different streams
never mix. With the json codec a frame is checked to be JSON and then
appended as it was read (the channel format is JSON), and a sink's json
frame is the channel value itself: no decode/encode round trip.

Frames or events that fail become error events for the connector's `err`
port: `{"error": ..., "connector": ..., "data": <the frame>}`, the frame as
text when it is UTF-8 and as bytes otherwise (a binflux or tremor frame), so
the raw bytes survive for inspection or replay.

The bulk path: a pull's frames stay one list of bytes from the preprocessors'
split to the append (a `Run`), and json frames are validated all at once
(`validate_json_frames`: msgspec checks the syntax of every line without
building Python objects, one C call per pull). Only when that finds a bad
frame are the frames checked one by one, so the bad ones go to `err` and the
rest of the pull proceeds.

The columnar path: a file chunk behind a lone `separate` (newline) with the
json codec skips even the split. `json_lines_column` turns the chunk into the
batch's value column directly (offsets from the newline positions, data
without them), so no Python object is made per line; a chunk it cannot take
as it is goes the bulk path above.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contraflow.codecs import NO_EVENT, Codec, CodecError, FrameErrors, Postprocessors, Preprocessors
from contraflow.codecs.processors.separate import SeparatePostprocessor, SeparatePreprocessor
from contraflow.connectors.base import ConnectorContext, SinkEvent, SourceData
from contraflow.events import decode_value, encode_value, event_from_record
from contraflow.runtime.appends import BinaryColumn, values_size
from contraflow.runtime.json_lines import json_lines_column


@dataclass(slots=True)
class Outgoing:
    """A channel record ready to append: value bytes, metadata, and the port it leaves by."""

    value: bytes
    meta: dict[str, Any]
    port: str = "out"


@dataclass(slots=True)
class Run:
    """Consecutive channel records that share metadata and port: appended as columns, never one by one."""

    values: list[bytes] | BinaryColumn
    meta: dict[str, Any]
    port: str = "out"

    @property
    def nbytes(self) -> int:
        return values_size(self.values)


@dataclass
class Decoded:
    """What one `SourceData` became: runs of records for their ports, and error events for `err`."""

    runs: list[Run] = field(default_factory=list)
    errors: list[Outgoing] = field(default_factory=list)

    def add(self, value: bytes, meta: dict[str, Any], port: str) -> None:
        """One record, joining the last run when it has the same metadata and port."""
        last = self.runs[-1] if self.runs else None
        if last is not None and last.meta is meta and last.port == port and isinstance(last.values, list):
            last.values.append(value)
        else:
            self.runs.append(Run([value], meta, port))

    @property
    def count(self) -> int:
        return sum(len(run.values) for run in self.runs)


_JSON_LINES = msgspec.json.Decoder(msgspec.Raw)


def validate_json_frames(frames: list[bytes]) -> list[bytes] | None:
    """`frames` without blank ones if every frame is one JSON document, else None (check them one by one).

    One C pass over the joined frames: msgspec parses each line for syntax and
    keeps only a raw slice of it (no Python objects for the content); UTF-8 is
    checked by decoding the whole buffer once, which msgspec skips in strings.
    """
    joined = b"\n".join(frames)
    try:
        documents = _JSON_LINES.decode_lines(joined)
        joined.decode("utf-8")
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    if len(documents) == len(frames):
        return frames
    kept = [frame for frame in frames if frame.strip()]  # decode_lines skips blank lines
    return kept if len(kept) == len(documents) else None


def error_event(
    ctx: ConnectorContext, reason: str, data: bytes | None, meta: dict[str, Any] | None
) -> Outgoing:
    """An error event for the `err` port, with the offending data (text if it is UTF-8, else bytes)."""
    value: dict[str, Any] = {"error": reason, "connector": ctx.name}
    if data is not None:
        raw = bytes(data)
        try:
            value["data"] = raw.decode("utf-8")
        except UnicodeDecodeError:
            value["data"] = raw
    return Outgoing(encode_value(value), dict(meta or {}), "err")


def _plain_json(ctx: ConnectorContext, codec: Codec | None) -> bool:
    """The json codec without options: channel bytes and wire bytes are the same JSON."""
    return codec is not None and codec.name == "json" and not (ctx.spec.codec and ctx.spec.codec.config)


ChainT = TypeVar("ChainT", Preprocessors, Postprocessors)


class _PerStream(Generic[ChainT]):
    """What decoding and encoding share: the connector's codec (none when structured) and a
    processor chain per stream (a TCP connection), built on the stream's first use."""

    def __init__(self, ctx: ConnectorContext, structured: bool, new_chain: Callable[[], ChainT]) -> None:
        self.ctx = ctx
        self.structured = structured
        self.codec: Codec | None = None if structured else ctx.codec()
        self.json_fast_path = _plain_json(ctx, self.codec)
        self._new_chain: Callable[[], ChainT] = new_chain
        self._streams: dict[int | None, ChainT] = {}

    def chain(self, stream: int | None) -> ChainT:
        chain = self._streams.get(stream)
        if chain is None:
            chain = self._streams[stream] = self._new_chain()
        return chain


@dataclass(slots=True)
class _Split:
    """A chunk's frames waiting for the codec, with what its preprocessors rejected (to `err` first)."""

    frames: list[bytes]
    errors: list[Outgoing]
    meta: dict[str, Any]
    port: str


class SourceDecoder(_PerStream[Preprocessors]):
    """Turns `SourceData` into channel records, keeping a preprocessor chain per stream.

    A pull's frames, over all its chunks, go to the codec in one `decode_batch`
    call (a codec like avro reads a batch in bulk); the json codec's frames are
    checked and kept as they are instead."""

    def __init__(self, ctx: ConnectorContext, structured: bool) -> None:
        super().__init__(ctx, structured, ctx.preprocessors)
        self._splits: list[_Split] = []

    def decode(self, data: SourceData) -> Decoded:
        out = Decoded()
        meta = data.meta or {}
        if data.events is not None:
            for value, event_meta in data.events:
                merged = {**meta, **event_meta} if meta else event_meta
                out.add(encode_value(value), merged, data.port)
        for chunk, chunk_meta in data.chunks or ():
            self._chunk(out, data.stream, chunk, {**meta, **chunk_meta} if meta else chunk_meta, data.port)
        if data.data is not None:
            self._chunk(out, data.stream, data.data, meta, data.port)
        if data.end_stream:
            self.end_stream(data.stream, out, meta, data.port)
        self._decode_splits(out)
        return out

    def _chunk(self, out: Decoded, stream: int, data: bytes, meta: dict[str, Any], port: str) -> None:
        """One chunk of `stream`: split by its preprocessors, decoded, its records into `out`."""
        chain = self.chain(stream)
        column = self._json_lines(chain, data)
        if column is not None:
            if column.count:
                out.runs.append(Run(column, meta, port))
        else:
            self._frames(out, lambda: chain.process(data), meta, port)

    def _json_lines(self, chain: Preprocessors, data: bytes) -> BinaryColumn | None:
        """The chunk's records as one column when the framing is json lines and nothing is held
        from an earlier chunk (see `json_lines`); None to take the frame-by-frame split."""
        if not self.json_fast_path or len(chain.stages) != 1:
            return None
        stage = chain.stages[0]
        limit = stage.whole_lines_limit() if isinstance(stage, SeparatePreprocessor) else None
        return None if limit is None else json_lines_column(data, limit)

    def end_stream(self, stream: int | None, out: Decoded, meta: dict[str, Any], port: str = "out") -> None:
        """Flush what the stream's preprocessors still hold (a last line without a newline)."""
        chain = self._streams.pop(stream, None)
        if chain is not None:
            self._frames(out, chain.finish, meta, port)
        self._decode_splits(out)

    def finish(self) -> Decoded:
        """End of every stream: the source is exhausted."""
        out = Decoded()
        for stream in list(self._streams):
            self.end_stream(stream, out, {})
        return out

    def _frames(self, out: Decoded, step: Any, meta: dict[str, Any], port: str) -> None:
        """Split by `step`: json frames checked now, other codecs' frames left for `_decode_splits`."""
        errors: list[Outgoing] = []
        try:
            frames = step()
        except FrameErrors as err:
            frames = err.frames
            errors = [error_event(self.ctx, str(e), e.data, meta) for e in err.errors]
        if not self.json_fast_path:
            self._splits.append(_Split(frames, errors, meta, port))
            return
        out.errors.extend(errors)
        if frames:
            valid = validate_json_frames(frames)
            if valid is not None:
                if valid:
                    out.runs.append(Run(valid, meta, port))
                return
        for frame in frames:
            self._check_json_frame(out, frame, meta, port)

    def _check_json_frame(self, out: Decoded, frame: bytes, meta: dict[str, Any], port: str) -> None:
        if not frame.strip():
            return  # blank lines between JSON documents carry no event
        try:
            orjson.loads(frame)  # validate only; the frame itself is the channel value
        except orjson.JSONDecodeError as err:
            out.errors.append(error_event(self.ctx, f"invalid {self._codec_name}: {err}", frame, meta))
            return
        out.add(bytes(frame), meta, port)

    def _decode_splits(self, out: Decoded) -> None:
        """The frames split so far, decoded in one call of the codec, in order into `out`."""
        splits, self._splits = self._splits, []
        frames = [frame for split in splits for frame in split.frames]
        if not frames:
            for split in splits:
                out.errors.extend(split.errors)
            return
        assert self.codec is not None
        results = iter(self.codec.decode_batch(frames))
        for split in splits:
            out.errors.extend(split.errors)
            for frame in split.frames:
                self._add_decoded(out, frame, next(results), split.meta, split.port)

    def _add_decoded(self, out: Decoded, frame: bytes, decoded: Any, meta: dict[str, Any], port: str) -> None:
        """One frame's `decode_batch` result: a channel record, nothing (`NO_EVENT`), or an error event."""
        if decoded is NO_EVENT:
            return  # a frame without an event (an influx comment line)
        try:
            if isinstance(decoded, Exception):
                raise decoded
            value = encode_value(decoded)
        except (CodecError, TypeError, ValueError) as err:
            out.errors.append(error_event(self.ctx, f"invalid {self._codec_name}: {err}", frame, meta))
            return
        out.add(value, meta, port)

    @property
    def _codec_name(self) -> str:
        return self.codec.name if self.codec is not None else "event"


class SinkEncoder(_PerStream[Postprocessors]):
    """Turns channel records into `SinkEvent`s with wire frames, a postprocessor chain per stream."""

    def __init__(self, ctx: ConnectorContext, structured: bool) -> None:
        super().__init__(ctx, structured, ctx.postprocessors)
        self.bulk_separator = self._bulk_separator()
        stages = ctx.postprocessors().stages if self.codec is not None else ()
        self.ends_per_batch = any(getattr(stage, "ends_per_batch", False) for stage in stages)

    def end_batch(self, events: Sequence[SinkEvent]) -> None:
        """After a batch of a chain that ends its stream per batch (`streaming-compress`): each stream's
        end (the compressed stream's trailer) after its last event, so every delivered batch is whole."""
        if not self.ends_per_batch:
            return
        last = {event.stream: event for event in events}
        for stream, event in last.items():
            chain = self._streams.pop(stream, None)
            if chain is not None:
                event.frames = [*event.frames, *chain.finish()]

    def _bulk_separator(self) -> bytes | None:
        """What ends every frame when channel values go out as they are, else None.

        That is the json codec with no postprocessor (b"") or one `separate`
        (its byte): the wire bytes of a run of records are then their values,
        each followed by it, and `join_values` makes them in one step.
        """
        if not self.json_fast_path:
            return None
        stages = self.ctx.postprocessors().stages
        if not stages:
            return b""
        if len(stages) == 1 and isinstance(stages[0], SeparatePostprocessor):
            return stages[0].separator
        return None

    def encode(self, value: bytes, headers: Sequence[tuple[str, bytes]], port: str, offset: int) -> SinkEvent:
        """One channel record as a sink event; raises CodecError when it cannot be encoded."""
        event = event_from_record(value, headers)
        raw = event.raw or b""
        sink_event = SinkEvent(raw, event.meta, [], port, offset)
        if self.codec is None:
            return sink_event
        frame = raw if self.json_fast_path else self.codec.encode(decode_value(raw))
        sink_event.frames = self.chain(sink_event.stream).process(frame)
        return sink_event


def join_values(offsets: memoryview, data: memoryview, first: int, separator: bytes) -> bytes:
    """Values `first`.. of a binary column (int32 offsets, data), each followed by `separator`, as one buffer.

    One pyarrow kernel over the column as it lies in the fetched batch
    (`binary_join_element_wise` of each value and "" with the separator
    between): a copy per value in C++, no Python step per value.
    """
    ends = np.frombuffer(offsets, dtype="<i4")
    if not separator:
        return bytes(data[int(ends[first]) : int(ends[-1])])
    column = pa.Array.from_buffers(
        pa.binary(), len(ends) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    ).slice(first)
    joined = pc.binary_join_element_wise(column, b"", separator)
    _, joined_offsets, joined_data = joined.buffers()
    end = int(np.frombuffer(joined_offsets, dtype="<i4", count=1, offset=4 * len(joined))[0])
    return joined_data.slice(0, end).to_pybytes()
