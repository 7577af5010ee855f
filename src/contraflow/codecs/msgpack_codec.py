"""The `msgpack` codec: MessagePack frames to plain values, `bin` to `bytes`.

Strings are decoded as UTF-8 `str` (raw `bin` data as `bytes`), so a value
round-trips exactly. Timestamps (extension -1) become integer nanoseconds since
the epoch, the unit Tremor uses for time; other extension types have no plain
value and are a decode error rather than an opaque object leaking into pipelines.
Map keys must be strings, as record keys are.
"""

from __future__ import annotations

from typing import Any

import msgpack

from contraflow.codecs.codec import Codec
from contraflow.codecs.errors import CodecError


def _reject_extension(code: int, data: bytes) -> Any:
    raise ValueError(f"unsupported MessagePack extension type {code}")


class MsgpackCodec(Codec):
    name = "msgpack"
    mime_types = ("application/msgpack", "application/x-msgpack", "application/vnd.msgpack")

    def setup(self) -> None:
        self._packer = msgpack.Packer(use_bin_type=True)

    def decode(self, data: bytes) -> Any:
        try:
            return msgpack.unpackb(data, raw=False, timestamp=2, ext_hook=_reject_extension)
        except (ValueError, TypeError, msgpack.UnpackException) as err:
            raise CodecError(
                "msgpack", str(err) or f"invalid MessagePack data ({type(err).__name__})"
            ) from None

    def encode(self, value: Any) -> bytes:
        try:
            return self._packer.pack(value)
        except (TypeError, ValueError, OverflowError) as err:
            self._packer.reset()
            raise CodecError("msgpack", f"cannot encode value: {err}") from None
