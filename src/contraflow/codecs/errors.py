"""The two ways a codec or processor can fail, kept apart on purpose.

A `ConfigError` is the user's mistake in a Troy file (unknown name, bad key or
value): the runtime reports it at load time with the connector alias and
refuses to deploy. A `CodecError` is bad *data* at run time: the runtime turns
it into an event on the connector's `err` port and carries on, never a crash.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from difflib import get_close_matches
from functools import partial
from typing import Any

from contraflow.errors import UserError


class ConfigError(UserError):
    """A codec or processor configuration the user must fix.

    `kind` is "codec", "preprocessor" or "postprocessor"; `name` the codec or
    processor (empty when the name itself is wrong); `key` the offending config
    key, if any; `valid` the names or keys that would have been accepted.
    """

    def __init__(
        self, message: str, *, kind: str, name: str = "", key: str = "", valid: Sequence[str] = ()
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.name = name
        self.key = key
        self.valid = tuple(valid)

    def __reduce__(self) -> tuple[Any, ...]:
        rebuild = partial(type(self), kind=self.kind, name=self.name, key=self.key, valid=self.valid)
        return (rebuild, (str(self),))


def unknown(what: str, given: str, valid: Iterable[str]) -> str:
    """`unknown codec 'jsn' (did you mean 'json'?); valid codecs: ...` for names and keys alike."""
    choices = sorted(valid)
    close = get_close_matches(given, choices, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    listing = ", ".join(choices) if choices else "none"
    return f"unknown {what} {given!r}{hint}; valid {what}s: {listing}"


class CodecError(Exception):
    """Data a codec or processor could not handle: which one (`name`, `kind`) and a short `reason`.

    `data` is the frame that failed when one frame did (a chain fills it in for
    its per-frame stages), so the runtime's `err` event can carry it.
    """

    def __init__(self, name: str, reason: str, *, kind: str = "codec", data: bytes | None = None) -> None:
        super().__init__(f"{kind} {name!r}: {reason}")
        self.name = name
        self.reason = reason
        self.kind = kind
        self.data = data

    @property
    def codec(self) -> str:
        """The codec or processor name (alias of `name`, the word the runtime's err events use)."""
        return self.name

    def __reduce__(self) -> tuple[Any, ...]:
        """Errors cross process boundaries (Spark workers): pickle by fields, not by message."""
        return (partial(type(self), kind=self.kind, data=self.data), (self.name, self.reason))


class FrameErrors(CodecError):
    """Some frames of one `process`/`finish` call failed while others succeeded.

    Raised only after the processor consumed its whole input, so its state is
    consistent: `frames` holds the good frames of the call (deliver them),
    `errors` one `CodecError` per failed frame (send them to `err`).
    """

    def __init__(self, frames: list[bytes], errors: list[CodecError]) -> None:
        first = errors[0]
        more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
        super().__init__(first.name, first.reason + more, kind=first.kind)
        self.frames = frames
        self.errors = errors

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.frames, self.errors))
