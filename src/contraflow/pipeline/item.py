"""The event as it travels between nodes inside one executor.

An `Item` keeps the channel bytes (`raw`) next to the decoded value and
decodes lazily: a pipeline that only routes events never parses them, and an
event no node changed leaves with its original bytes. A node that builds a
new value or changes one in place clears `raw` (`Item.changed`), so the output
knows it must encode.
"""

from __future__ import annotations

from typing import Any

from orjson import loads

from contraflow.events import decode_value, encode_value

# Channel values holding binary data carry `{"$bytes": ...}` (see contraflow.events).
BYTES_MARK = b'"$bytes"'

# The value slot of an item whose `raw` bytes have not been parsed yet.
UNDECODED: Any = object()


class Item:
    """One event in flight: value (or UNDECODED), metadata dict (or None when empty), raw bytes."""

    __slots__ = ("value", "meta", "raw")

    def __init__(self, value: Any, meta: dict[str, Any] | None, raw: bytes | None) -> None:
        self.value = value
        self.meta = meta
        self.raw = raw

    def decode(self) -> Any:
        """The value, parsing `raw` on first use (raises on bytes that are not JSON)."""
        value = self.value
        if value is UNDECODED:
            raw = self.raw
            assert raw is not None
            value = self.value = loads(raw) if BYTES_MARK not in raw else decode_value(raw)
        return value

    def meta_dict(self) -> dict[str, Any]:
        """The metadata as a dict scripts can read and write (created on first use)."""
        meta = self.meta
        if meta is None:
            meta = self.meta = {}
        return meta

    def original(self) -> Any:
        """The value for an error event: decoded if possible, else the raw bytes as text."""
        if self.value is not UNDECODED:
            return self.value
        assert self.raw is not None
        try:
            return decode_value(self.raw)
        except ValueError:
            return self.raw.decode("utf-8", "replace")

    def to_bytes(self) -> bytes:
        """Channel bytes: the original `raw` when the value is unchanged, else the encoded value."""
        raw = self.raw
        return raw if raw is not None else encode_value(self.value)

    def copy(self) -> Item:
        """An independent item (values are copied deeply; undecoded bytes are shared, they are immutable)."""
        value = self.value if self.value is UNDECODED else copy_value(self.value)
        meta = copy_value(self.meta) if self.meta else None
        return Item(value, meta, self.raw)


def changed(value: Any, meta: dict[str, Any] | None) -> Item:
    """A new item for a value a node built (its raw bytes are unknown until encoded)."""
    return Item(value, meta, None)


def copy_value(value: Any) -> Any:
    """A deep copy of a JSON-like value (records, arrays, scalars, bytes)."""
    if isinstance(value, dict):
        return {k: copy_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_value(v) for v in value]
    return value
