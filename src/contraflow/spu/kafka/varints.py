"""Kafka's zigzag varints for whole columns at once (numpy), not record by record.

A Kafka record is a row of varint-prefixed fields. Encoding or decoding a batch
one record at a time in Python costs about a microsecond per record; the same
work done column-wise (every record's timestamp delta at once, then every
record's key length...) costs a few nanoseconds per record. These helpers are
that column-wise work: varints are laid out as (records x bytes) matrices with
a size per record, and `packed_rows` squeezes the padding out.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Int64s = npt.NDArray[np.int64]
UInt8s = npt.NDArray[np.uint8]
VARINT_BYTES = 5  # an int32 field
VARLONG_BYTES = 10  # an int64 field


class VarintError(ValueError):
    """A varint that runs past its limit or past the end of its buffer."""


def zigzag(values: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """Kafka's zigzag mapping of signed values (0, -1, 1, -2 ... to 0, 1, 2, 3 ...)."""
    signed = np.asarray(values, dtype=np.int64)
    return ((signed << 1) ^ (signed >> 63)).view(np.uint64)


_SIZE_STEPS = np.array([1 << (7 * n) for n in range(1, VARLONG_BYTES)], dtype=np.uint64)


def varint_sizes(unsigned: npt.NDArray[np.uint64]) -> Int64s:
    """Bytes each value takes as a varint (7 bits per byte)."""
    return np.searchsorted(_SIZE_STEPS, unsigned, side="right").astype(np.int64) + 1


class VarintColumn:
    """One signed field of every record as zigzag varints: a matrix plus each row's size."""

    def __init__(self, values: npt.ArrayLike) -> None:
        unsigned = zigzag(values)
        self.sizes = varint_sizes(unsigned)
        width = int(self.sizes.max()) if len(unsigned) else 1
        if width == 1:  # the common case: every value under 64 (or over -65)
            self.matrix: UInt8s = unsigned.astype(np.uint8)[:, None]
            return
        shifts = np.arange(width, dtype=np.uint64) * np.uint64(7)
        matrix = ((unsigned[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
        continued = np.arange(width) < (self.sizes[:, None] - 1)  # every byte but a value's last
        self.matrix = matrix | (continued.astype(np.uint8) << np.uint8(7))

    @property
    def width(self) -> int:
        return int(self.matrix.shape[1])


def packed_rows(columns: list[VarintColumn]) -> tuple[Int64s, UInt8s]:
    """Each record's fields back to back: (bytes per record, all records' bytes in order)."""
    matrix = np.hstack([c.matrix for c in columns])
    sizes: Int64s = np.sum([c.sizes for c in columns], axis=0, dtype=np.int64)
    if all(c.width == 1 for c in columns):
        return sizes, matrix.ravel()
    used = np.hstack([np.arange(c.width) < c.sizes[:, None] for c in columns])
    return sizes, matrix[used]


def decode_varints(buf: UInt8s, positions: Int64s, limit: int) -> tuple[Int64s, Int64s]:
    """The zigzag varints starting at `positions` of `buf`: (values, sizes in bytes).

    Byte by byte across all varints at once: when every varint is one byte long
    (the common case for most fields) that is a single step.
    Raises VarintError when one has no last byte within `limit` bytes or within `buf`.
    """
    if len(positions) and int(positions.max()) >= len(buf):
        raise VarintError(f"varint at byte {int(positions.max())} runs past the end")
    first = buf[positions]
    unsigned = (first & 0x7F).astype(np.uint64)
    sizes = np.ones(len(positions), dtype=np.int64)
    going = np.flatnonzero(first >= 0x80)  # the varints not finished yet
    for step in range(1, limit):
        if len(going) == 0:
            return _unzigzag(unsigned), sizes
        at = positions[going] + step
        if int(at.max()) >= len(buf):
            raise VarintError(
                f"varint at byte {int(positions[going[np.argmax(at >= len(buf))]])} runs past the end"
            )
        byte = buf[at]
        unsigned[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * step)
        sizes[going] += 1
        going = going[byte >= 0x80]
    if len(going) == 0:
        return _unzigzag(unsigned), sizes
    raise VarintError(f"varint at byte {int(positions[going[0]])} has no end within {limit} bytes")


def _unzigzag(unsigned: npt.NDArray[np.uint64]) -> Int64s:
    return (unsigned >> np.uint64(1)).view(np.int64) ^ -(unsigned & np.uint64(1)).view(np.int64)
