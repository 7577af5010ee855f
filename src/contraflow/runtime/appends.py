"""A pull's records as one log batch, built column by column.

A source pull is thousands of records that share their metadata (a file
chunk, a TCP read): their headers are one packed value repeated, and the
values are a list of bytes from the preprocessors' split. The batch's Arrow
layout is built from those with C-level calls (`b"".join`, `accumulate`,
bytes repetition, `array.extend(range)`), so no Python step runs per record;
only the last record may differ (the source's resume position rides on it).
A source that made its values a `BinaryColumn` already (`json_lines`) hands
that over, and a batch of one such column is encoded from its buffers.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, chain, islice

import numpy as np

from contraflow.spu.protocol.batch import NO_HEADERS, BinaryBuffers, Headers, encode_columns, pack_headers


@dataclass(frozen=True)
class BinaryColumn:
    """Values in Arrow's binary layout (int32 little-endian offsets[count+1] from 0, data): many
    records' values held as two buffers instead of a Python object each."""

    offsets: bytes
    data: bytes
    count: int

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.to_list())

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def to_list(self) -> list[bytes]:
        """The values one by one, for the paths that take them so (a few records, mixed runs)."""
        bounds = np.frombuffer(self.offsets, dtype="<i4").tolist()
        data = self.data
        return [data[start:end] for start, end in zip(bounds, bounds[1:], strict=False)]


Values = Sequence[bytes] | BinaryColumn
MAX_COLUMN_BYTES = (1 << 31) - 1  # int32 offsets


def values_size(values: Values) -> int:
    """Bytes of all `values`."""
    return values.nbytes if isinstance(values, BinaryColumn) else sum(map(len, values))


@dataclass
class ColumnRuns:
    """Records for one topic: value pieces, each run with one packed headers value for all its records."""

    pieces: list[Values] = field(default_factory=list)
    runs: list[tuple[int, bytes, Headers]] = field(default_factory=list)  # (records, packed, headers)

    def add(self, values: Values, headers: Headers) -> None:
        if not len(values):
            return
        self.pieces.append(values)
        packed = pack_headers(headers) if headers else NO_HEADERS
        if self.runs and self.runs[-1][1] == packed:
            count, _, same = self.runs[-1]
            self.runs[-1] = (count + len(values), packed, same)
        else:
            self.runs.append((len(values), packed, headers))

    def __len__(self) -> int:
        return sum(map(len, self.pieces))

    @property
    def last_headers(self) -> Headers:
        """The headers of the last record."""
        return self.runs[-1][2] if self.runs else []

    def records(self) -> Iterator[tuple[bytes, Headers]]:
        """(value, headers) one by one, for the few records that go through a lingering producer."""
        values = iter(self._values())
        for count, _, headers in self.runs:
            for value in islice(values, count):
                yield value, headers

    def encode(self, last_headers: Headers | None = None) -> bytearray:
        """The batch; `last_headers` replaces the last record's headers (the resume marker)."""
        runs = [(count, packed) for count, packed, _ in self.runs]
        if last_headers is not None:
            count, packed = runs.pop()
            if count > 1:
                runs.append((count - 1, packed))
            runs.append((1, pack_headers(last_headers)))
        headers = None if all(packed == NO_HEADERS for _, packed in runs) else _repeated_column(runs)
        if len(self.pieces) == 1 and isinstance(self.pieces[0], BinaryColumn):
            column = self.pieces[0]
            return encode_columns(column.count, (column.offsets, column.data), headers=headers)
        values = self._values()
        return encode_columns(len(values), binary_column(values), headers=headers)

    def _values(self) -> list[bytes]:
        lists = (p.to_list() if isinstance(p, BinaryColumn) else p for p in self.pieces)
        return list(chain.from_iterable(lists))


def binary_column(values: Sequence[bytes]) -> BinaryBuffers:
    """int32 offsets[N+1] and the joined data: Arrow's binary layout of `values`."""
    offsets = array("i", accumulate(map(len, values), initial=0))
    return _little_endian(offsets), b"".join(values)


def _repeated_column(runs: Sequence[tuple[int, bytes]]) -> BinaryBuffers:
    """A binary column of runs of one repeated value each, without a step per record (numpy
    ranges for the offsets, bytes repetition for the data)."""
    offsets = [np.zeros(1, dtype=np.int64)]
    data: list[bytes] = []
    end = 0
    for count, value in runs:
        size = len(value)
        offsets.append(np.arange(1, count + 1, dtype=np.int64) * size + end)
        data.append(value * count)
        end += size * count
    if end > MAX_COLUMN_BYTES:
        raise ValueError(f"batch too large: a column exceeds {MAX_COLUMN_BYTES} bytes")
    return np.concatenate(offsets).astype("<i4").tobytes(), b"".join(data)


def _little_endian(offsets: array[int]) -> bytes:
    if array("i", [1]).tobytes()[0] != 1:
        offsets.byteswap()
    return offsets.tobytes()
