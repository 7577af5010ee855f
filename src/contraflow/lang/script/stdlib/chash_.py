"""`tremor::chash::` functions: jump consistent hashing (Lamping and Veach) of string keys.

The key is hashed to 64 bits with BLAKE2b (keyed with `k1`/`k2` for
`jump_with_keys`), then jump hashing picks a slot. Slots are stable across runs
and machines and move minimally when `slot_count` changes; they are not the
same numbers Tremor's SipHash-based implementation produces.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.values import fail

_MASK = 0xFFFF_FFFF_FFFF_FFFF


def _jump(key_hash: int, buckets: int) -> int:
    b, j = -1, 0
    while j < buckets:
        b = j
        key_hash = (key_hash * 2862933555777941757 + 1) & _MASK
        j = int((b + 1) * (float(1 << 31) / float((key_hash >> 33) + 1)))
    return b


def _slot(fn: str, key: Any, slot_count: Any, secret: bytes = b"") -> int:
    text = want(key, str, fn, "key")
    buckets = want(slot_count, int, fn, "slot_count")
    if buckets <= 0:
        fail(f"{fn}: slot_count must be positive, got {buckets}")
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=secret).digest()
    return _jump(int.from_bytes(digest, "little"), buckets)


@tremor_fn("chash::jump")
def jump(key: Any, slot_count: Any) -> int:
    return _slot("chash::jump", key, slot_count)


@tremor_fn("chash::jump_with_keys")
def jump_with_keys(k1: Any, k2: Any, key: Any, slot_count: Any) -> int:
    fn = "chash::jump_with_keys"
    secret = want(k1, int, fn, "k1").to_bytes(8, "little", signed=k1 < 0)
    secret += want(k2, int, fn, "k2").to_bytes(8, "little", signed=k2 < 0)
    return _slot(fn, key, slot_count, secret)


@tremor_fn("chash::sorted_serialize")
def sorted_serialize(value: Any) -> str:
    """Compact JSON with record keys sorted, so equal values always serialize the same."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
