"""Spark bridge throughput: SPU topic -> Spark -> SPU topic, against plain PySpark.

Prints one JSON object. For each query (passthrough; JSON parse + filter) it
measures events/s through the `contraflow` source and sink, and the same query
in plain PySpark in the same run, alternating, medians of R runs after one
uncounted warm-up of each:

- `baseline`: the issue's baseline. A generator data source (a Python
  streaming source whose `read` makes the very records the topic holds, as
  Arrow) feeding the same query into a Python Arrow writer that drops the
  rows (any PySpark job delivering from Python pays for that hop). -> `ratio`
- `free_input`: stricter. The records are made once up front and the source
  only memory-maps them from an Arrow file, so its input costs nearly
  nothing. -> `ratio_vs_free_input`
- `noop`: the free input into Spark's JVM `noop` sink. -> `ratio_vs_noop`

events/s = records / the query's micro-batch execution time (Spark's progress
`triggerExecution`: query start-up, a fixed cost per query, is left out; the
wall-clock rates including it are reported too). `per_batch_overhead_ms`
compares the median duration of 10-record micro-batches.

Usage: python benchmarks/spark_bridge.py [--records N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

from contraflow.spark import session
from contraflow.spark.arrow_log import SOURCE_DDL, SOURCE_SCHEMA
from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.protocol.topics import TopicConfig

PARTITIONS = 2
GENERATED_ROWS_PER_BATCH = 10_000
EVENT_SCHEMA = "id long, level string, service string, status int, latency_ms long, message string"


def make_event(i: int) -> bytes:
    """~200-byte JSON log events; one in five is an error."""
    return orjson.dumps(
        {
            "id": i,
            "level": "error" if i % 5 == 0 else "info",
            "service": f"service-{i % 17}",
            "status": 500 if i % 5 == 0 else 200,
            "latency_ms": i % 997,
            "message": f"request {i:08d} handled by worker {i % 13} " + "x" * 70,
        }
    )


def event_rows(first: int, end: int) -> pa.Table:
    """Records [first, end) in the source's schema, the same values the topic holds."""
    count = end - first
    return pa.table(
        [
            pa.array(["generated"] * count, pa.string()),
            pa.array([i % PARTITIONS for i in range(first, end)], pa.int32()),
            pa.array(range(first, end), pa.int64()),
            pa.array([0] * count, pa.timestamp("us", tz="UTC")),
            pa.nulls(count, pa.binary()),
            pa.array([make_event(i) for i in range(first, end)], pa.binary()),
            pa.array([[]] * count, SOURCE_SCHEMA.field("headers").type),
        ],
        schema=SOURCE_SCHEMA,
    )


def write_generated(path: Path, total: int) -> None:
    """The free-input baseline's records, made once in the driver as an Arrow IPC file."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, SOURCE_SCHEMA) as writer:
        writer.write_table(event_rows(0, total), max_chunksize=65_536)


class GeneratorRange(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.partition, self.start, self.end = partition, start, end


class GeneratorReader(DataSourceStreamReader):
    """Plain PySpark baselines: records made in the Python worker (`generate`), or
    memory-mapped from the file `write_generated` made (`mmap`)."""

    def __init__(self, path: str, total: int, max_rows: int | None, mode: str) -> None:
        self.path = path
        self.total = total
        self.max_rows = max_rows
        self.mode = mode

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def initialOffset(self) -> dict[str, int]:
        return {"i": 0}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, int]:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        end = (
            self.total if not isinstance(limit, ReadMaxRows) else min(self.total, start["i"] + limit.max_rows)
        )
        return {"i": end}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        lo, hi = start["i"], end["i"]
        step = max(1, (hi - lo + PARTITIONS - 1) // PARTITIONS)
        return [GeneratorRange(p, s, min(hi, s + step)) for p, s in enumerate(range(lo, hi, step))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, GeneratorRange)
        if self.mode == "generate":
            for first in range(partition.start, partition.end, GENERATED_ROWS_PER_BATCH):
                end = min(partition.end, first + GENERATED_ROWS_PER_BATCH)
                yield from event_rows(first, end).to_batches()
            return
        table = pa.ipc.open_file(pa.memory_map(self.path)).read_all()  # zero-copy from the page cache
        yield from table.slice(partition.start, partition.end - partition.start).to_batches(65_536)

    def commit(self, end: dict[str, Any]) -> None:
        pass


class DiscardWriter(DataSourceStreamArrowWriter):
    """Plain PySpark's delivery hop: rows reach a Python writer, which drops them."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[Any], batchId: int) -> None:
        pass


class GeneratorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_generator"

    def schema(self) -> str:
        return SOURCE_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        limit = self.options.get("maxOffsetsPerTrigger")
        return GeneratorReader(
            self.options["path"],
            int(self.options["total"]),
            int(limit) if limit else None,
            self.options.get("mode", "generate"),
        )

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamArrowWriter:
        return DiscardWriter()


def passthrough(df: DataFrame) -> DataFrame:
    return df.select("value")


def parse_filter(df: DataFrame) -> DataFrame:
    parsed = df.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
    return parsed.where("e.status >= 500").select(F.to_json("e").alias("value"))


@dataclass
class Rates:
    """Events/s of repeated runs of one query on one path."""

    processing: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)

    def add(self, records: int, query_df: DataFrame, sink: str, options: dict[str, str]) -> None:
        writer = query_df.writeStream.format(sink).trigger(availableNow=True)
        for key, value in options.items():
            writer = writer.option(key, value)
        started = time.perf_counter()
        query = writer.start()
        query.awaitTermination()
        wall = time.perf_counter() - started
        busy = sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"])
        self.processing.append(records / (busy / 1000))
        self.wall.append(records / wall)

    def median(self) -> float:
        return statistics.median(self.processing)


def fill_topic(spu: SpuClient, topic: str, records: int) -> None:
    spu.create_topic(topic, TopicConfig(partitions=PARTITIONS))
    for start in range(0, records, 5000):
        values = [make_event(i) for i in range(start, min(records, start + 5000))]
        spu.produce(topic, (start // 5000) % PARTITIONS, values)


BASELINES = (
    ("baseline", "generate", "bench_generator"),
    ("free_input", "mmap", "bench_generator"),
    ("noop", "mmap", "noop"),
)


def measure(
    spark: SparkSession, spu: SpuClient, addr: str, work: Path, records: int, repeats: int
) -> dict[str, Any]:
    fill_topic(spu, "bench-in", records)
    write_generated(work / "generated.arrow", records)
    results: dict[str, Any] = {}
    runs = 0
    for label, transform in (("passthrough", passthrough), ("parse_filter", parse_filter)):
        ours = Rates()
        plain = {name: Rates() for name, _, _ in BASELINES}
        for r in range(repeats + 1):  # run 0 warms the workers up and is not counted
            counted = r > 0
            runs += 1
            out = f"bench-{label}-{runs}"
            spu.create_topic(out)
            source = (
                spark.readStream.format("contraflow").option("spu", addr).option("topic", "bench-in").load()
            )
            target = ours if counted else Rates()
            target.add(
                records,
                transform(source),
                "contraflow",
                {"spu": addr, "topic": out, "checkpointLocation": str(work / out)},
            )
            for name, mode, sink in BASELINES:
                target = plain[name] if counted else Rates()
                generated = generator(spark, work, records, mode=mode)
                target.add(
                    records, transform(generated), sink, {"checkpointLocation": str(work / f"{name}-{out}")}
                )
        results[label] = {
            "events_per_s": round(ours.median()),
            "wall_clock_events_per_s": round(statistics.median(ours.wall)),
            **{f"{name}_events_per_s": round(rates.median()) for name, rates in plain.items()},
            "baseline_wall_clock_events_per_s": round(statistics.median(plain["baseline"].wall)),
            "ratio": round(ours.median() / plain["baseline"].median(), 3),
            "ratio_vs_free_input": round(ours.median() / plain["free_input"].median(), 3),
            "ratio_vs_noop": round(ours.median() / plain["noop"].median(), 3),
            "wall_clock_ratio": round(
                statistics.median(ours.wall) / statistics.median(plain["baseline"].wall), 3
            ),
        }
    results["per_batch_overhead_ms"] = batch_overhead(spark, spu, addr, work, records)
    return results


def generator(spark: SparkSession, work: Path, total: int, **options: str) -> DataFrame:
    """A plain PySpark source over the same records (see GeneratorReader for the modes)."""
    reader = spark.readStream.format("bench_generator").option("path", str(work / "generated.arrow"))
    reader = reader.option("total", str(total))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def batch_overhead(
    spark: SparkSession, spu: SpuClient, addr: str, work: Path, records: int
) -> dict[str, float]:
    """Median trigger duration of 10-record micro-batches on both paths."""
    spu.create_topic("bench-tiny-out")
    source = (
        spark.readStream.format("contraflow")
        .option("spu", addr)
        .option("topic", "bench-in")
        .option("maxOffsetsPerTrigger", "10")
        .load()
    )
    generated = generator(spark, work, records, maxOffsetsPerTrigger="10", mode="generate")
    ours = _tiny_batches(
        source,
        "contraflow",
        {"spu": addr, "topic": "bench-tiny-out", "checkpointLocation": str(work / "tiny")},
    )
    plain = _tiny_batches(generated, "bench_generator", {"checkpointLocation": str(work / "tiny-plain")})
    return {"contraflow": ours, "baseline": plain, "difference": round(ours - plain, 1)}


def _tiny_batches(df: DataFrame, sink: str, options: dict[str, str], batches: int = 15) -> float:
    writer = df.select("value").writeStream.format(sink).trigger(processingTime="0 seconds")
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.start()
    deadline = time.monotonic() + 120
    while (
        len([p for p in query.recentProgress if p["numInputRows"]]) < batches and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    query.stop()
    durations = [p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"]][1:]
    return round(statistics.median(durations), 1) if durations else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cf-bench-") as tmp:
        work = Path(tmp)
        with EmbeddedSpu(work / "spu", mode="process") as embedded, SpuClient(embedded.addr) as spu:
            spark = session(data_dir=work / "spark")
            spark.dataSource.register(GeneratorSource)
            results = measure(spark, spu, embedded.addr, work, args.records, args.repeats)
            spark.stop()
    print(
        json.dumps(
            {
                "benchmark": "spark_bridge",
                "records": args.records,
                "record_bytes": len(make_event(1)),
                **results,
            }
        )
    )


if __name__ == "__main__":
    main()
