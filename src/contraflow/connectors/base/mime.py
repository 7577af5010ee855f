"""Tremor's `mime_mapping` for the HTTP connectors: the codec of a body is chosen by its Content-Type.

`mime_mapping = {"application/json": "json", "text/csv": "csv", "*/*": "json"}`
maps a MIME type (without parameters such as `; charset=...`, compared in
lower case) to a codec name; `*/*` is the codec of every type not listed. As
in Tremor, a mapping replaces the default one entirely, and a type it does not
cover (and no `*/*`) falls back to the connector's own `codec`.

Both ways: a body that arrives (a request to `http_server`, a response to
`http_client`) is decoded with the codec of its Content-Type; a body that goes
out is encoded with the codec of the Content-Type it is sent with (the one
the event's headers set, else the connector codec's). Where that codec is the
connector's own, nothing changes: the runtime's preprocessors, codec and
postprocessors do the work as for any connector, so the channel's JSON goes
out as it is. Otherwise the connector decodes (preprocessors, then the mapped
codec) or encodes (the mapped codec, then postprocessors) the body itself;
frames that fail become error events on `err`, shaped as the runtime's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contraflow.codecs import NO_EVENT, Codec, CodecError, ConfigError, FrameErrors
from contraflow.codecs import codec as make_codec
from contraflow.connectors.base.connector import ConnectorContext, SinkEvent, SourceData
from contraflow.connectors.base.options import ConfigReader

ANY = "*/*"
KEY = "mime_mapping"


def read_mime_mapping(cfg: ConfigReader) -> dict[str, str] | None:
    """The `mime_mapping` option, checked (every codec must exist), or None when not set."""
    mapping = cfg.record(KEY)
    if KEY not in cfg.config:
        return None
    checked: dict[str, str] = {}
    for mime, name in mapping.items():
        if not isinstance(name, str):
            raise cfg.error(KEY, f"the codec of {mime!r} must be a codec name, got {name!r}")
        try:
            make_codec(name)
        except ConfigError as err:
            raise cfg.error(KEY, f"{mime!r}: {err}") from err
        checked[bare_type(mime)] = name
    return checked


def bare_type(content_type: str) -> str:
    """`Application/JSON; charset=utf-8` -> `application/json`."""
    return content_type.split(";", 1)[0].strip().lower()


def content_type_of(headers: Mapping[str, Any] | None) -> str | None:
    """The Content-Type a header record (`{name: value | [values]}`, any case) sets, if any."""
    for name, value in (headers or {}).items():
        if str(name).lower() == "content-type":
            first = value[0] if isinstance(value, list) and value else value
            return first if isinstance(first, str) else None
    return None


@dataclass
class MimeCodecs:
    """The codecs of a connector's `mime_mapping`, built once, and how bodies are coded with them."""

    ctx: ConnectorContext
    codecs: dict[str, Codec]
    names: dict[str, str]

    @classmethod
    def of(cls, ctx: ConnectorContext, mapping: Mapping[str, str] | None) -> MimeCodecs | None:
        if mapping is None:
            return None
        return cls(ctx, {mime: make_codec(name) for mime, name in mapping.items()}, dict(mapping))

    def _mapped(self, content_type: str | None) -> str | None:
        """The mapping's key for a Content-Type: the type itself, else `*/*`; None when neither."""
        mime = bare_type(content_type) if content_type else None
        if mime is not None and mime in self.codecs:
            return mime
        return ANY if ANY in self.codecs else None

    def _own(self, key: str) -> bool:
        """True when the mapped codec is the connector's own (the runtime codes the body)."""
        spec = self.ctx.spec.codec
        own = spec.name if spec is not None else "json"
        return self.names[key] == own and not (spec is not None and spec.config)

    def decoded(self, body: bytes, content_type: str | None, meta: dict[str, Any]) -> list[SourceData] | None:
        """A body's events (and error events for `err`) when a codec other than the connector's
        decodes it; None when the connector's own codec does (the runtime decodes the data)."""
        key = self._mapped(content_type)
        if key is None or self._own(key):
            return None
        chain = self.ctx.preprocessors()
        errors: list[tuple[Any, dict[str, Any]]] = []
        frames = self._frames(lambda: [*chain.process(body), *chain.finish()], errors, meta)
        values = []
        for frame in frames:
            try:
                value = self.codecs[key].decode(frame)
            except (CodecError, ValueError, TypeError) as err:
                errors.append(self._error(f"invalid {self.names[key]}: {err}", frame, meta))
                continue
            if value is not NO_EVENT:
                values.append((value, meta))
        failed = [SourceData(events=errors, port="err")] if errors else []
        if not values and not errors:
            values = [(None, meta)]  # a body without an event (whitespace) is one, as an empty body is
        return [*failed, SourceData(events=values)]  # last: the caller gives it the ack token

    def encoded(self, event: SinkEvent, content_type: str) -> bytes:
        """The body of an outgoing event sent as `content_type`; raises CodecError when it cannot be."""
        key = self._mapped(content_type)
        if key is None or self._own(key):
            return b"".join(event.frames)
        try:
            frame = self.codecs[key].encode(event.value())
        except (ValueError, TypeError) as err:
            raise CodecError(self.names[key], str(err)) from err
        chain = self.ctx.postprocessors()
        return b"".join([*chain.process(frame), *chain.finish()])

    def _frames(
        self, step: Any, errors: list[tuple[Any, dict[str, Any]]], meta: dict[str, Any]
    ) -> list[bytes]:
        try:
            frames: list[bytes] = step()
        except FrameErrors as err:
            errors.extend(self._error(str(e), e.data, meta) for e in err.errors)
            return err.frames
        except CodecError as err:
            errors.append(self._error(str(err), err.data, meta))
            return []
        return frames

    def _error(self, reason: str, data: bytes | None, meta: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        value: dict[str, Any] = {"error": reason, "connector": self.ctx.name}
        if data is not None:
            try:
                value["data"] = bytes(data).decode("utf-8")
            except UnicodeDecodeError:
                value["data"] = bytes(data)
        return value, dict(meta)
