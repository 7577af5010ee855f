"""The `json` codec, on orjson: integers stay integers, floats stay floats.

As in Tremor, `mode` is `unsorted` (default, fastest: keys keep their order)
or `sorted` (keys sorted when encoding, for output that must compare byte for
byte); Tremor's `json-sorted` is the same codec, sorted by default. Duplicate keys decode last-one-wins. `bytes` values encode as an array
of byte values, the way Tremor writes binary data into JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from contraflow.codecs.codec import Codec
from contraflow.codecs.config import BadValue
from contraflow.codecs.errors import CodecError

MODES = ("sorted", "unsorted")


@dataclass(frozen=True)
class JsonOptions:
    mode: str = "unsorted"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise BadValue("mode", f"must be one of {', '.join(map(repr, MODES))}, got {self.mode!r}")


def _default(value: object) -> object:
    """orjson's fallback for types it does not know: bytes-likes become arrays of ints."""
    if isinstance(value, bytes | bytearray | memoryview):
        return list(bytes(value))
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def json_dumps(value: Any, codec: str, option: int = 0) -> bytes:
    """JSON text of `value`; shared with the codecs that fall back to JSON for non-text values."""
    try:
        return orjson.dumps(value, default=_default, option=option)
    except TypeError as err:  # orjson.JSONEncodeError is a TypeError
        raise CodecError(codec, f"cannot encode value: {err}") from None


class JsonCodec(Codec[JsonOptions]):
    name = "json"
    mime_types = ("application/json",)

    def setup(self) -> None:
        self._option = orjson.OPT_SORT_KEYS if self.options.mode == "sorted" else 0

    def decode(self, data: bytes) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as err:
            raise CodecError(self.name, str(err)) from None

    def encode(self, value: Any) -> bytes:
        return json_dumps(value, self.name, self._option)


@dataclass(frozen=True)
class SortedJsonOptions(JsonOptions):
    mode: str = "sorted"


class JsonSortedCodec(JsonCodec):
    """Tremor's `json-sorted`: the json codec with `mode` sorted."""

    name = "json-sorted"
    Options = SortedJsonOptions
