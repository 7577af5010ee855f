"""Log ranges: a read task's offsets as one row, fetched back as envelopes by the sink's task
(`contraflow.spark.log_ranges`), against a real SPU (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa

from contraflow.spark.log_ranges import RANGE_SCHEMA, RangeFetcher, range_row
from contraflow.spu.client import SpuClient
from contraflow.spu.protocol.batch import decode_batch
from contraflow.spu.protocol.range_stage import MIN_RECORDS
from contraflow.spu.protocol.topics import TopicConfig


def test_a_range_row_names_the_tasks_offsets_and_counts_its_records() -> None:
    row = range_row("127.0.0.1:1", "in", 3, 100, 250)
    assert row.schema == RANGE_SCHEMA
    assert row.to_pylist() == [
        {
            "range_spu": "127.0.0.1:1",
            "range_topic": "in",
            "range_partition": 3,
            "range_start": 100,
            "range_end": 250,
            "records": 150,
        }
    ]


def test_the_fetcher_gives_exactly_each_ranges_records_in_order(
    spu: SpuClient, spu_addr: str, topic_name: str
) -> None:
    spu.create_topic(topic_name, TopicConfig(partitions=2))
    big = MIN_RECORDS + 10
    for partition in (0, 1):
        for base in (0, big, 2 * big):  # three whole batches per partition
            values = [b'{"p":%d,"i":%d}' % (partition, base + i) for i in range(big)]
            spu.produce(topic_name, partition, values)
    # Partition 0 cut through its first and last batch; partition 1 exactly its middle batch.
    ranges = [(0, 5, 3 * big - 7), (1, big, 2 * big)]
    rows = pa.Table.from_batches([range_row(spu_addr, topic_name, p, lo, hi) for p, lo, hi in ranges])

    opened: list[SpuClient] = []

    def connect(addr: str) -> SpuClient:
        opened.append(SpuClient(addr))
        return opened[-1]

    with RangeFetcher(64 << 10, connect) as fetcher:  # small fetches: a range takes several
        staged = [decode_batch(bytes(view)) for view in fetcher.envelopes(rows)]
    values = [bytes(v) for batch in staged for v in batch.values()]
    expected = [b'{"p":%d,"i":%d}' % (p, i) for p, lo, hi in ranges for i in range(lo, hi)]
    assert values == expected
    assert len(opened) == 1  # one client per SPU address, closed with the fetcher
