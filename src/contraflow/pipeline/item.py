"""The event as it travels between nodes inside one executor.

An item is a 3-element list `[value, meta, raw]`:
- `raw`: the channel bytes the event arrived as, or None once a node built or
  changed the value (the output then encodes it);
- `value`: the decoded value, or `UNDECODED` until a node reads the event;
- `meta`: the metadata dict (`$`), or None while empty.

A plain list and not a class because every event creates several items and a
list costs a fraction of an object with `__init__`; the hot paths index it
with the literal positions below (`item[0]` is the value, `item[1]` the
metadata, `item[2]` the raw bytes). Decoding is lazy: a pipeline that only
routes events never parses them, and an event no node changed leaves with its
original bytes.
"""

from __future__ import annotations

from typing import Any

from orjson import loads

from contraflow.events import decode_value

__all__ = [
    "BYTES_MARK",
    "UNDECODED",
    "Item",
    "copy_item",
    "decode",
    "loads",
    "meta_dict",
    "opened",
    "original",
]

Item = list[Any]

# The value slot of an item whose raw bytes have not been parsed yet.
UNDECODED: Any = object()

# Channel values holding binary data carry `{"$bytes": ...}` (see contraflow.events).
BYTES_MARK = b'"$bytes"'


def decode(item: Item) -> Any:
    """The item's value, parsing its raw bytes on first use (raises on bytes that are not JSON)."""
    value = item[0]
    if value is UNDECODED:
        raw = item[2]
        value = item[0] = loads(raw) if BYTES_MARK not in raw else decode_value(raw)
    return value


def meta_dict(item: Item) -> dict[str, Any]:
    """The metadata as a dict scripts can read and write (created on first use)."""
    meta = item[1]
    if meta is None:
        meta = item[1] = {}
    return meta


def opened(item: Item) -> tuple[Any, dict[str, Any]]:
    """`decode` and `meta_dict` in one call: what a script node needs from every item it runs on."""
    value = item[0]
    if value is UNDECODED:
        raw = item[2]
        value = item[0] = loads(raw) if BYTES_MARK not in raw else decode_value(raw)
    meta = item[1]
    if meta is None:
        meta = item[1] = {}
    return value, meta


def original(item: Item) -> Any:
    """The value for an error event: decoded if possible, else the raw bytes as text."""
    if item[0] is not UNDECODED:
        return item[0]
    try:
        return decode_value(item[2])
    except ValueError:
        return bytes(item[2]).decode("utf-8", "replace")


def copy_item(item: Item) -> Item:
    """An independent item (values copied deeply; raw bytes shared, they are immutable)."""
    value = item[0]
    meta = item[1]
    return [value if value is UNDECODED else copy_value(value), copy_value(meta) if meta else None, item[2]]


def copy_value(value: Any) -> Any:
    """A deep copy of a JSON-like value (records, arrays, scalars, bytes)."""
    if isinstance(value, dict):
        return {k: copy_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_value(v) for v in value]
    return value
