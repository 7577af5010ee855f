"""`contraflow query` shows each micro-batch's output as it commits: the tail of the output topics."""

from __future__ import annotations

import uuid

from contraflow.pipeline.spark.local import CommittedTail


def test_each_read_emits_only_what_was_committed_since_the_last(spu) -> None:
    out, err = f"tail-out-{uuid.uuid4().hex[:8]}", f"tail-err-{uuid.uuid4().hex[:8]}"
    for topic in (out, err):
        spu.create_topic(topic)
    tail = CommittedTail(spu, {"out": out, "err": err})
    emitted: list[tuple[str, list[bytes]]] = []

    def emit(port: str, values: list[bytes]) -> None:
        emitted.append((port, values))

    tail.emit_new(emit)
    assert emitted == []  # nothing yet: no empty emits
    spu.produce(out, 0, [b"a", b"b"])
    tail.emit_new(emit)
    spu.produce(out, 0, [b"c"])
    spu.produce(err, 0, [b"oops"])
    tail.emit_new(emit)
    tail.emit_new(emit)
    assert emitted == [("out", [b"a", b"b"]), ("out", [b"c"]), ("err", [b"oops"])]
