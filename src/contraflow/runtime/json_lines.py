"""A chunk of newline-separated JSON as one binary column, with no Python object per line.

The file source hands over chunks that end on a newline, and with the json
codec behind a plain `separate` preprocessor a chunk's events are exactly its
non-empty lines, each kept as read. So the log batch's value column can be
made from the chunk itself: numpy finds the newlines (they give the offsets),
`bytes.replace` drops them (that gives the data), and msgspec checks every
line in one C pass over the lines joined as a JSON array. The array alone
does not tell where its elements were cut: a document may run over a line's
end (`{"a":[1` then `]}`) and a line may be two (`1,2`), and the count can
still come out right. So each element's raw text must span its line exactly:
msgspec hands back each element's bytes (`Raw`), and their lengths must be
the lines' lengths (an element that crossed a newline, or shares its line, is
longer or shorter than its line; a line with spaces around its document is
too, and takes the frame-by-frame path, which accepts it).

Anything out of the ordinary (a bad or blank-but-not-empty line, a line
over `max_length`, a chunk not ending on a newline) gives None: the caller
then takes the frame-by-frame path, which reports errors and skips blanks
as it always did, so both paths give the same records.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from contraflow.runtime.appends import MAX_COLUMN_BYTES, BinaryColumn

NEWLINE = b"\n"
_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])
_EMPTY_LINES = re.compile(rb"\n\n+")


def json_lines_column(data: bytes, max_length: int) -> BinaryColumn | None:
    """The non-empty lines of `data` as a binary column, if every one is a JSON document of at
    most `max_length` bytes (0: no limit) and `data` ends with a newline; else None."""
    if not data.endswith(NEWLINE) or len(data) > MAX_COLUMN_BYTES:
        return None
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == NEWLINE[0])
    lengths = np.diff(ends, prepend=-1) - 1
    if max_length and int(lengths.max()) > max_length:
        return None
    filled = lengths > 0
    count = int(np.count_nonzero(filled))
    if not _one_document_per_line(data, ends, lengths[filled]):
        return None
    # A line ends, once the newlines before it are gone, as many bytes earlier as newlines precede it.
    offsets = np.zeros(count + 1, dtype="<i4")
    offsets[1:] = (ends - np.arange(len(ends)))[filled]
    return BinaryColumn(offsets.tobytes(), data.replace(NEWLINE, b""), count)


def _one_document_per_line(data: bytes, ends: np.ndarray, lengths: np.ndarray) -> bool:
    """Whether the non-empty lines of `data` (newlines at `ends`, these `lengths`) are one JSON
    document each, in valid UTF-8 (msgspec does not check the UTF-8 of strings, so the buffer is
    decoded once for that)."""
    count = len(lengths)
    try:
        documents = _ARRAY.decode(_as_json_array(data, ends, count))
        if not data.isascii():  # ASCII is UTF-8: no decoded copy of the chunk to check it
            data.decode("utf-8")
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    if len(documents) != count:
        return False
    spans = np.fromiter(map(len, documents), dtype=lengths.dtype, count=count)
    return bool(np.array_equal(spans, lengths))


def _as_json_array(data: bytes, ends: np.ndarray, count: int) -> bytes | bytearray:
    """`[line,line,...]` of the non-empty lines: a copy of `data` with its newlines made commas
    and a bracket at each end (empty lines, when there are any, squeezed out first)."""
    if count < len(ends):
        body = _EMPTY_LINES.sub(NEWLINE, data.strip(NEWLINE))
        return b"".join((b"[", body.replace(NEWLINE, b","), b"]"))
    array = bytearray(len(data) + 1)
    array[0] = ord("[")
    array[1:] = data
    view = np.frombuffer(array, dtype=np.uint8)
    view[ends + 1] = ord(",")
    view[-1] = ord("]")  # the last newline: `data` ends with one
    return array
