"""Exactly-once commits marked inside the replicated log (SPU clusters).

In a cluster the batch ledger is not a file of one SPU: every batch a commit
appends carries, in its header, which (query, batch id) wrote it, and the last
batch of a partition's commit says so. Followers copy the marks with the log,
so any replica can rebuild from its own log which batches were committed to a
partition (and spot a commit whose leader died before its last batch: that
tail is cut when the replica starts leading).

The mark reuses the header's producer field, as idempotent producers do
(`idempotence.py`), told apart by an attribute bit: the high 32 bits are a
hash of the query id, the low 31 bits the batch id. The header is covered by
the CRC, so the leader recomputes it when it marks a staged batch.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from contraflow.spu.protocol.batch import BatchHeader, Buffer, compute_crc

TRANSACTIONAL = 0x08  # attribute bit: the producer field is a commit mark
COMMIT_END = 0x80  # attribute bit: the last batch of a partition's commit
BATCH_ID_BITS = 31
MAX_BATCH_ID = (1 << BATCH_ID_BITS) - 1

_ATTRIBUTES_POS = 21
_PRODUCER_POS = 43
_CRC_POS = 17
_ATTRIBUTES = struct.Struct(">h")
_PRODUCER = struct.Struct(">q")
_CRC = struct.Struct(">I")


def query_hash(query_id: str) -> int:
    """32 bits naming a query in the log (two queries writing one partition collide with
    probability 2**-32 per pair of ids)."""
    return int.from_bytes(hashlib.blake2b(query_id.encode(), digest_size=4).digest(), "big")


@dataclass(frozen=True, slots=True)
class CommitMark:
    query: int  # query_hash of the query id
    batch_id: int
    last: bool  # the commit's last batch in this partition


def mark_of(header: BatchHeader) -> CommitMark | None:
    """The commit mark of a batch, None for a batch not written by a commit."""
    if not header.attributes & TRANSACTIONAL:
        return None
    field = header.producer_id
    return CommitMark(field >> BATCH_ID_BITS, field & MAX_BATCH_ID, bool(header.attributes & COMMIT_END))


def mark_batch(batch: Buffer, query_id: str, batch_id: int, *, last: bool) -> bytearray:
    """A copy of `batch` marked as written by commit (query_id, batch_id); CRC recomputed."""
    if not 0 <= batch_id <= MAX_BATCH_ID:
        raise ValueError(f"batch id {batch_id} does not fit a commit mark (0..{MAX_BATCH_ID})")
    out = bytearray(batch)
    (attributes,) = _ATTRIBUTES.unpack_from(out, _ATTRIBUTES_POS)
    attributes = (attributes | TRANSACTIONAL) & ~COMMIT_END
    if last:
        attributes |= COMMIT_END
    _ATTRIBUTES.pack_into(out, _ATTRIBUTES_POS, attributes)
    _PRODUCER.pack_into(out, _PRODUCER_POS, (query_hash(query_id) << BATCH_ID_BITS) | batch_id)
    _CRC.pack_into(out, _CRC_POS, compute_crc(out))
    return out
