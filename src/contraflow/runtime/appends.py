"""A pull's records as one log batch, built column by column.

A source pull is thousands of records that share their metadata (a file
chunk, a TCP read): their headers are one packed value repeated, and the
values are a list of bytes from the preprocessors' split. The record batch
format builds the batch's Arrow columns from those (`protocol.batch`'s
`binary_buffers` and `repeated_buffers`: C-level calls, no Python step per
record); only the last record may differ (the source's resume position rides
on it). A source that made its values a `BinaryColumn` already (`json_lines`) hands
that over, and a batch of one such column is encoded from its buffers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice

import numpy as np

from contraflow.spu.protocol.batch import (
    NO_HEADERS,
    Headers,
    binary_buffers,
    encode_columns,
    pack_headers,
    repeated_buffers,
)


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
        headers = None if all(packed == NO_HEADERS for _, packed in runs) else repeated_buffers(runs)
        if len(self.pieces) == 1 and isinstance(self.pieces[0], BinaryColumn):
            column = self.pieces[0]
            return encode_columns(column.count, (column.offsets, column.data), headers=headers)
        values = self._values()
        return encode_columns(len(values), binary_buffers(values), headers=headers)

    def _values(self) -> list[bytes]:
        lists = (p.to_list() if isinstance(p, BinaryColumn) else p for p in self.pieces)
        return list(chain.from_iterable(lists))
