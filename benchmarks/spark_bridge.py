"""Spark bridge throughput: SPU topic -> Spark -> SPU topic, against plain PySpark.

Prints one JSON object. For each query (passthrough; JSON parse + filter) it
measures events/s through the `contraflow` source and sink, and the same query
reading identical records from a generator data source (plain PySpark, no log
on either side; the records are made once up front and the generator
memory-maps them from an Arrow file, so the baseline pays almost nothing for
its input) in the same run, twice: into a Python Arrow
stream writer that discards the rows (the same query shape: any PySpark job
delivering from Python pays for that hop) -> `ratio`, and into Spark's JVM
`noop` sink -> `ratio_vs_noop`. `per_batch_overhead_ms` compares the median
micro-batch duration of tiny batches.

Usage: python benchmarks/spark_bridge.py [--records N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
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
from contraflow.spu.storage.config import TopicConfig

PARTITIONS = 2
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


def write_generated(path: Path, total: int) -> None:
    """The baseline's input, made once in the driver: the same records as the topic,
    in the source's schema, as an Arrow IPC file the generator memory-maps."""
    values = pa.array([make_event(i) for i in range(total)], pa.binary())
    table = pa.table(
        [
            pa.array(["generated"] * total, pa.string()),
            pa.array([i % PARTITIONS for i in range(total)], pa.int32()),
            pa.array(range(total), pa.int64()),
            pa.array([0] * total, pa.timestamp("us", tz="UTC")),
            pa.nulls(total, pa.binary()),
            values,
            pa.array([[]] * total, SOURCE_SCHEMA.field("headers").type),
        ],
        schema=SOURCE_SCHEMA,
    )
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, SOURCE_SCHEMA) as writer:
        writer.write_table(table, max_chunksize=65_536)


class GeneratorRange(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.partition, self.start, self.end = partition, start, end


class GeneratorReader(DataSourceStreamReader):
    """Plain PySpark baseline: the same records, generated in the Python worker as Arrow."""

    def __init__(self, path: str, total: int, max_rows: int | None) -> None:
        self.path = path
        self.total = total
        self.max_rows = max_rows

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
            self.options["path"], int(self.options["total"]), int(limit) if limit else None
        )

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamArrowWriter:
        return DiscardWriter()


def passthrough(df: DataFrame) -> DataFrame:
    return df.select("value")


def parse_filter(df: DataFrame) -> DataFrame:
    parsed = df.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
    return parsed.where("e.status >= 500").select(F.to_json("e").alias("value"))


def timed_query(
    query_df: DataFrame, sink: str, options: dict[str, str]
) -> tuple[float, list[dict[str, Any]]]:
    writer = query_df.writeStream.format(sink).trigger(availableNow=True)
    for key, value in options.items():
        writer = writer.option(key, value)
    started = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    return time.perf_counter() - started, query.recentProgress


def fill_topic(spu: SpuClient, topic: str, records: int) -> None:
    spu.create_topic(topic, TopicConfig(partitions=PARTITIONS))
    for start in range(0, records, 5000):
        values = [make_event(i) for i in range(start, min(records, start + 5000))]
        spu.produce(topic, (start // 5000) % PARTITIONS, values)


def measure(
    spark: SparkSession, spu: SpuClient, addr: str, work: Path, records: int, repeats: int
) -> dict[str, Any]:
    fill_topic(spu, "bench-in", records)
    write_generated(work / "generated.arrow", records)
    results: dict[str, Any] = {}
    for label, transform in (("passthrough", passthrough), ("parse_filter", parse_filter)):
        ours, plain, noop = [], [], []
        for r in range(repeats):
            out = f"bench-{label}-{r}"
            spu.create_topic(out)
            source = (
                spark.readStream.format("contraflow").option("spu", addr).option("topic", "bench-in").load()
            )
            secs, _ = timed_query(
                transform(source),
                "contraflow",
                {"spu": addr, "topic": out, "checkpointLocation": str(work / out)},
            )
            ours.append(records / secs)
            for sink, runs in (("bench_generator", plain), ("noop", noop)):
                generated = generator(spark, work, records)
                secs, _ = timed_query(
                    transform(generated), sink, {"checkpointLocation": str(work / f"{sink}-{out}")}
                )
                runs.append(records / secs)
        results[label] = {
            "events_per_s": round(statistics.median(ours)),
            "baseline_events_per_s": round(statistics.median(plain)),
            "ratio": round(statistics.median(ours) / statistics.median(plain), 3),
            "noop_sink_events_per_s": round(statistics.median(noop)),
            "ratio_vs_noop": round(statistics.median(ours) / statistics.median(noop), 3),
        }
    results["per_batch_overhead_ms"] = batch_overhead(spark, spu, addr, work, records)
    return results


def generator(spark: SparkSession, work: Path, total: int, **options: str) -> DataFrame:
    """The baseline source over the records written by `write_generated`."""
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
    generated = generator(spark, work, records, maxOffsetsPerTrigger="10")
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
    parser.add_argument("--records", type=int, default=300_000)
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
