"""`stdio`: standard input as a source; standard output and error as a sink (Tremor's `stdio`).

Source: stdin read in chunks as one stream (the preprocessors frame it, e.g.
`separate` for lines); end of input ends the source. Stdin is left alone
when nothing is connected to `out` (stdio used only for output). Pipes and terminals are
read through the event loop; a regular file redirected to stdin (which epoll
cannot watch) is read in a worker thread.

Sink: events arriving on port `in` or `stdout` go to stdout, on `stderr` to
stderr, each batch written and flushed in a worker thread so a slow reader
never blocks the loop. No config.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import BinaryIO

from contraflow.connectors.base import Connector, ConnectorContext, SinkEvent, SourceData, register
from contraflow.stopping import STOPPED, unless_stopped

CHUNK_SIZE = 64 * 1024


@register("stdio")
class StdioConnector(Connector):
    def __init__(self, ctx: ConnectorContext) -> None:
        super().__init__(ctx)
        self._reader: asyncio.StreamReader | None = None
        self._transport: asyncio.ReadTransport | None = None
        self._eof = False

    async def connect(self) -> None:
        if self._reader is not None or self._eof or "out" not in self.ctx.outputs:
            return  # stdin is only touched when something reads from this connector
        reader = asyncio.StreamReader(limit=CHUNK_SIZE)
        loop = asyncio.get_running_loop()
        try:
            self._transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(sys.stdin.fileno()), "rb", 0)
            )
            self._reader = reader
        except (ValueError, OSError):  # a regular file: epoll cannot watch it
            self._reader = None

    async def pull(self) -> SourceData | None:
        if self._eof or "out" not in self.ctx.outputs:
            return None
        if self._reader is not None:
            read = await unless_stopped(self._reader.read(CHUNK_SIZE), self.ctx.quiescing)
            if read is STOPPED:
                return None
            data = read
        else:
            data = await asyncio.to_thread(os.read, sys.stdin.fileno(), CHUNK_SIZE)
        if not data:
            self._eof = True
            return None
        return SourceData(data=data)

    async def send(self, events: Sequence[SinkEvent]) -> None:
        out = [f for e in events if e.port != "stderr" for f in e.frames]
        err = [f for e in events if e.port == "stderr" for f in e.frames]
        if out:
            await asyncio.to_thread(_write, sys.stdout.buffer, out)
        if err:
            await asyncio.to_thread(_write, sys.stderr.buffer, err)

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
            # The event loop made stdin non-blocking (shared with the dup); give it back as it was.
            with contextlib.suppress(OSError, ValueError):
                os.set_blocking(sys.stdin.fileno(), True)


def _write(stream: BinaryIO, frames: list[bytes]) -> None:
    stream.write(b"".join(frames))
    stream.flush()
