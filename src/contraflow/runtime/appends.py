"""A pull's records as one log batch, built column by column.

A source pull is thousands of records that share their metadata (a file
chunk, a TCP read): their headers are one packed value repeated, and the
values are a list of bytes from the preprocessors' split. The batch's Arrow
layout is built from those with C-level calls (`b"".join`, `accumulate`,
bytes repetition, `array.extend(range)`), so no Python step runs per record;
only the last record may differ (the source's resume position rides on it).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, islice

from contraflow.spu.protocol.batch import NO_HEADERS, BinaryBuffers, Headers, encode_columns, pack_headers


@dataclass
class ColumnRuns:
    """Records for one topic: value lists, each run with one packed headers value for all its records."""

    values: list[bytes] = field(default_factory=list)
    runs: list[tuple[int, bytes, Headers]] = field(default_factory=list)  # (records, packed, headers)

    def add(self, values: Sequence[bytes], headers: Headers) -> None:
        if not values:
            return
        self.values.extend(values)
        packed = pack_headers(headers) if headers else NO_HEADERS
        if self.runs and self.runs[-1][1] == packed:
            count, _, same = self.runs[-1]
            self.runs[-1] = (count + len(values), packed, same)
        else:
            self.runs.append((len(values), packed, headers))

    def __len__(self) -> int:
        return len(self.values)

    @property
    def last_headers(self) -> Headers:
        """The headers of the last record."""
        return self.runs[-1][2] if self.runs else []

    def records(self) -> Iterator[tuple[bytes, Headers]]:
        """(value, headers) one by one, for the few records that go through a lingering producer."""
        values = iter(self.values)
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
        return encode_columns(len(self.values), binary_column(self.values), headers=headers)


def binary_column(values: Sequence[bytes]) -> BinaryBuffers:
    """int32 offsets[N+1] and the joined data: Arrow's binary layout of `values`."""
    offsets = array("i", accumulate(map(len, values), initial=0))
    return _little_endian(offsets), b"".join(values)


def _repeated_column(runs: Sequence[tuple[int, bytes]]) -> BinaryBuffers:
    """A binary column of runs of one repeated value each, without a step per record."""
    offsets = array("i", [0])
    data: list[bytes] = []
    end = 0
    for count, value in runs:
        size = len(value)
        offsets.extend(range(end + size, end + size * count + 1, size) if size else [end] * count)
        data.append(value * count)
        end += size * count
    return _little_endian(offsets), b"".join(data)


def _little_endian(offsets: array[int]) -> bytes:
    if array("i", [1]).tobytes()[0] != 1:
        offsets.byteswap()
    return offsets.tobytes()
