"""`tremor::chash::` functions: jump consistent hashing (Lamping and Veach) of string keys.

The slots are the ones Tremor gives. Tremor (through the `jumphash` crate) feeds
the key to SipHash-1-3 the way Rust hashes a `str` (its UTF-8 bytes, then one
0xFF byte) under two 64-bit keys, then runs jump hashing on the 64-bit result.
`chash::jump` uses Tremor's fixed keys, `'tremor\\0\\0'` and `'\\0\\0tremor'` read
as big-endian integers.
"""

from __future__ import annotations

from typing import Any

import orjson
from siphash24 import siphash13

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail

_MASK = 0xFFFF_FFFF_FFFF_FFFF
_TREMOR_K1 = 8_390_880_576_440_238_080
_TREMOR_K2 = 128_034_676_764_530
_STR_TERMINATOR = b"\xff"  # what Rust's `Hash for str` appends after the bytes


def _jump(key_hash: int, buckets: int) -> int:
    """Jump consistent hash, with the same float steps as the `jumphash` crate."""
    b, j = -1, 0
    while j < buckets:
        b = j
        key_hash = (key_hash * 2862933555777941757 + 1) & _MASK
        j = int((b + 1) * (float(1 << 31) / float((key_hash >> 33) + 1)))
    return b


def _u64(value: Any, fn: str, what: str) -> int:
    number = want(value, int, fn, what)
    if not 0 <= number <= _MASK:
        fail(f"{fn}: {what} must be an unsigned 64-bit integer, got {number}")
    return number


def slot(fn: str, key: Any, slot_count: Any, k1: int = _TREMOR_K1, k2: int = _TREMOR_K2) -> int:
    """The slot of `key` among `slot_count`, hashed with SipHash-1-3 under (`k1`, `k2`)."""
    text = want(key, str, fn, "key")
    buckets = want(slot_count, int, fn, "slot_count")
    if not 0 < buckets < 1 << 32:
        fail(f"{fn}: slot_count must be from 1 to 4294967295, got {buckets}")
    secret = k1.to_bytes(8, "little") + k2.to_bytes(8, "little")
    digest = siphash13(text.encode("utf-8") + _STR_TERMINATOR, key=secret).intdigest()
    return _jump(digest, buckets)


@tremor_fn("chash::jump")
def jump(key: Any, slot_count: Any) -> int:
    return slot("chash::jump", key, slot_count)


@tremor_fn("chash::jump_with_keys")
def jump_with_keys(k1: Any, k2: Any, key: Any, slot_count: Any) -> int:
    fn = "chash::jump_with_keys"
    return slot(fn, key, slot_count, _u64(k1, fn, "k1"), _u64(k2, fn, "k2"))


@tremor_fn("chash::sorted_serialize")
def sorted_serialize(value: Any) -> str:
    """Compact JSON with record keys sorted, so equal values always serialize the same."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
