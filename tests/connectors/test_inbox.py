"""The connectors' bounded inbox: chunks of one stream join as they are put, so a peer sending an event
per message fills it by bytes, not by messages."""

from __future__ import annotations

import asyncio

from contraflow.connectors.base import SourceData
from contraflow.connectors.base.inbox import JOIN_LIMIT, Inbox
from tests.connectors.support import run


def test_chunks_join_as_they_are_put_within_a_stream_and_meta_and_up_to_the_limit() -> None:
    async def body() -> None:
        inbox = Inbox(asyncio.Event(), capacity=4, joins=True)
        meta, other_meta = {"m": 1}, {"m": 2}
        lines = [b"%d\n" % i for i in range(1000)]
        for line in lines:  # far more than the capacity: each joins the chunk waiting, none waits
            await asyncio.wait_for(inbox.put(SourceData(data=line, stream=1, meta=meta)), 1)
        await inbox.put(SourceData(data=b"two\n", stream=2, meta=meta))  # another stream
        await inbox.put(SourceData(data=b"meta\n", stream=2, meta=other_meta))  # another meta
        await inbox.put(SourceData(stream=2, meta=other_meta, end_stream=True))  # never joined
        taken = [await inbox.get() for _ in range(4)]
        assert [t.data for t in taken[:3] if t] == [b"".join(lines), b"two\n", b"meta\n"]
        assert taken[3] is not None and taken[3].end_stream and inbox.empty()

        big = b"x" * (JOIN_LIMIT // 2 + 1) + b"\n"
        for _ in range(3):
            await inbox.put(SourceData(data=big, stream=1, meta=meta))
        sizes = [len((await inbox.get()).data or b"") for _ in range(2)]  # type: ignore[union-attr]
        assert sizes == [2 * len(big), len(big)]  # a chunk past the limit takes no more

    run(body())
