"""Pipelines on Spark against hand-written plain PySpark doing the same work, same input, same run.

Prints one JSON object. Input: EVENTS JSON events of ~150 bytes in a 2-partition
topic on an embedded SPU; every query reads it all with the available-now
trigger and writes its results to a topic with the `contraflow` sink. The rate
is input events / the micro-batches' execution time (Spark's progress
`triggerExecution` less the first batch's one-time query planning, so JVM and
query start-up are not counted; `ratio_with_query_start` keeps the
planning), each run on a
fresh checkpoint; pipeline and plain runs alternate, medians of REPEATS pairs
after one uncounted warm-up run of each. Spark's own console output goes to a
log file so standard output holds only the JSON.

- passthrough: `select event from in into out` vs `select value, headers`.
- aggregate: parse, filter (level = "error"), enrich (a tier from the amount),
  10-second tumbling count per key (10k keys) vs `from_json` -> `where` ->
  `withColumn` -> `groupBy(window, key).count()` with a watermark.
- counter: the pipeline-state RFC's counter script (one ordered stream) vs a
  plain `transformWithState` keeping one count in a value state.
- join: a windowed stream-stream inner join (error events with info events of the
  same key whose `ts` lie within 5 s) vs Spark's own stream-stream join: both sides
  `withWatermark` 5 s and a time-range join condition. `outputs` gives each side's
  pairs: both drop what their watermarks call late (the pipeline's follows the
  slower input partition, Spark's is set between micro-batches); on these
  events both give every pair (24,351 at 100k events).
  Spark reads the topic once per side; its rate counts events read once.

ratio = pipeline / plain (target >= 0.8 for passthrough and aggregate, >= 1.0 for join).
Arguments: EVENTS REPEATS [CASES] (comma-separated names, default all).
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from contraflow.lang.graph import PipelineGraph
from contraflow.pipeline.local import compile_query
from contraflow.pipeline.spark.listener import BatchProgress, query_listener
from contraflow.pipeline.spark.local import quiet_process_output
from contraflow.pipeline.spark.query import start_pipeline
from contraflow.spark import session
from contraflow.spu.client import SpuClient
from contraflow.spu.embedded import EmbeddedSpu
from contraflow.spu.storage import FlushPolicy, TopicConfig

EVENTS = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
CASES = sys.argv[3].split(",") if len(sys.argv) > 3 else ["passthrough", "aggregate", "counter", "join"]
KEYS = 10_000
CONFIG = TopicConfig(partitions=2, segment_bytes=256 << 20, flush=FlushPolicy.never())

PASSTHROUGH = "select event from in into out;"
AGGREGATE = """
define script enrich
script
  let event.tier = match event.amount > 500 of case true => "high" default => "low" end;
  event
end;
create script enrich;
define window ten_seconds from tumbling with interval = 10000000000 end;
select event from in where event.level == "error" into enrich;
select {"key": group[0], "count": aggr::stats::count()} from enrich[ten_seconds] group by event.key into out;
"""
COUNTER = """
define script counter
script
  let state = match type::is_null(state) of case true => 1 default => state + 1 end;
  {"count": state, "event": event}
end;
create script counter;
select event from in into counter;
select event from counter into out;
"""
JOIN = """
create stream errors;
create stream infos;
select event from in where event.level == "error" into errors;
select event from in where event.level == "info" into infos;
select {"key": left.key, "error": left.ts, "info": right.ts, "amount": right.amount}
from errors with time = event.ts * 1000000 join infos with time = event.ts * 1000000
on left.key == right.key within 5000000000 into out;
"""
SCHEMA = "level string, key string, amount long, host string, message string, ts long"


def events() -> list[bytes]:
    rng = random.Random(7)
    return [
        orjson.dumps(
            {
                "level": "error" if rng.random() < 0.5 else "info",
                "key": f"k{rng.randrange(KEYS)}",
                "amount": rng.randrange(1000),
                "host": f"host-{rng.randrange(50):02d}.example.org",
                "message": "request served " + "x" * rng.randrange(40, 80),
                "ts": i,
            }
        )
        for i in range(EVENTS)
    ]


class Bench:
    def __init__(self, spark: Any, spu: SpuClient, addr: str, root: Path) -> None:
        self.spark, self.spu, self.addr, self.root = spark, spu, addr, root
        self.runs = 0
        self.outputs = 0  # records the last run wrote
        query_listener(spark)  # registered before the first query: it must see all of its batches

    def sink_topic(self) -> str:
        self.runs += 1
        topic = f"out{self.runs}"
        self.spu.create_topic(topic, CONFIG)
        return topic

    def run(self, start: Callable[[str, str], Any]) -> tuple[float, float]:
        """(steady, with start-up) events/s of one available-now run of the query that
        `start(checkpoint, sink topic)` builds.

        A query's first micro-batch plans the whole query once (for a
        `transformWithState`, Spark starts a driver-side Python worker to learn
        the state schemas: about a second here); later batches plan in
        50-130 ms. `steady` leaves that first planning out, as a long-running
        pipeline pays it once; the other figure keeps it.
        """
        topic = self.sink_topic()
        query = start(str(self.root / f"ck{self.runs}"), topic)
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        self.outputs = sum(p.high_watermark for p in self.spu.describe_topic(topic).partitions)
        batches = [b for b in self.finished_batches(str(query.runId)) if b.rows_in]
        rows = sum(b.rows_in // len(b.input_ends) for b in batches)  # a self-join reads it twice
        seconds = sum(b.duration_s for b in batches)
        planning = dict(batches[0].phases)["planning"]
        assert rows == EVENTS, f"{rows} of {EVENTS} events read in {len(batches)} micro-batches"
        return rows / (seconds - planning), rows / seconds

    def finished_batches(self, run_id: str) -> list[BatchProgress]:
        """Every micro-batch of the run, from the session's listener: a query's own
        `recentProgress` keeps only the last 100 (`spark.sql.streaming.numRecentProgressUpdates`)."""
        listener = query_listener(self.spark)
        deadline = time.monotonic() + 30
        while not listener.ended(run_id):  # Spark's listener bus delivers events after the query ends
            if time.monotonic() > deadline:
                raise RuntimeError(f"Spark did not report the end of query run {run_id}")
            time.sleep(0.05)
        batches = listener.take(run_id)
        listener.forget(run_id)
        return batches

    def compare(self, ours: Callable[[str, str], Any], plain: Callable[[str, str], Any]) -> dict[str, Any]:
        """Runs alternate (the box is shared: load changes hit both sides alike); medians of REPEATS.

        One uncounted run of each goes first: it pays for starting and importing
        into the Python workers that kind of query uses.
        """
        self.run(plain)
        self.run(ours)
        pairs = []
        outputs = {}
        for _ in range(REPEATS):
            plain_rates = self.run(plain)
            outputs["plain_pyspark"] = self.outputs
            pairs.append((plain_rates, self.run(ours)))
            outputs["pipeline"] = self.outputs
        return {
            "outputs": outputs,
            "pipeline_events_per_s": round(statistics.median(o[0] for _, o in pairs)),
            "plain_pyspark_events_per_s": round(statistics.median(p[0] for p, _ in pairs)),
            "ratio": round(statistics.median(o[0] / p[0] for p, o in pairs), 3),
            "ratio_with_query_start": round(statistics.median(o[1] / p[1] for p, o in pairs), 3),
        }

    def source(self) -> Any:
        return (
            self.spark.readStream.format("contraflow").option("spu", self.addr).option("topic", "in").load()
        )

    def plain(self, frame: Any, checkpoint: str, topic: str, mode: str = "append") -> Any:
        return (
            frame.writeStream.format("contraflow")
            .option("spu", self.addr)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode(mode)
            .trigger(availableNow=True)
            .start()
        )

    def pipeline(self, graph: PipelineGraph) -> Callable[[str, str], Any]:
        def start(checkpoint: str, topic: str) -> Any:
            return start_pipeline(
                self.spark,
                graph,
                spu=self.addr,
                inputs={"in": "in"},
                outputs={"out": topic},
                checkpoint=checkpoint,
                name=f"bench{self.runs}",
                consumer=f"bench{self.runs}",
                trigger="availableNow",
            )

        return start


def plain_passthrough(bench: Bench) -> Callable[[str, str], Any]:
    return lambda checkpoint, topic: bench.plain(bench.source().select("value", "headers"), checkpoint, topic)


def plain_aggregate(bench: Bench) -> Callable[[str, str], Any]:
    from pyspark.sql import functions as F

    def start(checkpoint: str, topic: str) -> Any:
        parsed = bench.source().select(
            "timestamp", F.from_json(F.col("value").cast("string"), SCHEMA).alias("e")
        )
        counts = (
            parsed.where("e.level = 'error'")
            .withColumn("tier", F.when(F.col("e.amount") > 500, "high").otherwise("low"))
            .withWatermark("timestamp", "0 seconds")
            .groupBy(F.window("timestamp", "10 seconds"), F.col("e.key").alias("key"))
            .count()
        )
        return bench.plain(
            counts.select(F.to_json(F.struct("key", "count")).alias("value")), checkpoint, topic
        )

    return start


def plain_counter(bench: Bench) -> Callable[[str, str], Any]:
    from pyspark.sql import Row
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StatefulProcessor

    class Counter(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", "n long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            stored = self.count.get()
            n = stored[0] if stored else 0
            out = []
            for row in sorted(rows, key=lambda r: (r.partition, r.offset)):
                n += 1
                out.append(Row(value=orjson.dumps({"count": n, "event": orjson.loads(row.value)})))
            self.count.update((n,))
            return iter(out)

        def close(self) -> None:
            pass

    def start(checkpoint: str, topic: str) -> Any:
        rows = (
            bench.source()
            .withColumn("k", F.lit(""))
            .groupBy("k")
            .transformWithState(Counter(), "value binary", "Append", "None")
        )
        return bench.plain(rows, checkpoint, topic)

    return start


def plain_join(bench: Bench) -> Callable[[str, str], Any]:
    from pyspark.sql import functions as F

    def side(level: str, name: str) -> Any:
        parsed = bench.source().select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("e"))
        return (
            parsed.where(f"e.level = '{level}'")
            .select(
                F.col("e.key").alias(f"{name}_key"),
                F.col("e.ts").alias(f"{name}_ts"),
                F.col("e.amount").alias(f"{name}_amount"),
                F.timestamp_millis(F.col("e.ts")).alias(f"{name}_time"),
            )
            .withWatermark(f"{name}_time", "5 seconds")
        )

    def start(checkpoint: str, topic: str) -> Any:
        condition = (
            "error_key = info_key AND info_time BETWEEN error_time - INTERVAL 5 SECONDS"
            " AND error_time + INTERVAL 5 SECONDS"
        )
        joined = side("error", "error").join(side("info", "info"), F.expr(condition))
        fields = [
            F.col("error_key").alias("key"),
            F.col("error_ts").alias("error"),
            F.col("info_ts").alias("info"),
            F.col("info_amount").alias("amount"),
        ]
        return bench.plain(joined.select(F.to_json(F.struct(*fields)).alias("value")), checkpoint, topic)

    return start


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="bench-pipelines-") as tmp,
        quiet_process_output(Path(tmp) / "spark.log") as (out, _err),
    ):
        root = Path(tmp)
        with EmbeddedSpu(root / "spu", mode="process") as spu_server, SpuClient(spu_server.addr) as spu:
            spu.create_topic("in", CONFIG)
            data = events()
            half = len(data) // 2
            for partition, part in ((0, data[:half]), (1, data[half:])):
                for i in range(0, len(part), 5000):
                    spu.produce("in", partition, part[i : i + 5000])
            spark = session(master="local[2]", data_dir=root / "spark")
            bench = Bench(spark, spu, spu_server.addr, root)
            results: dict[str, Any] = {"events": EVENTS, "repeats": REPEATS, "event_bytes": len(data[0])}
            for name, text, plain in (
                ("passthrough", PASSTHROUGH, plain_passthrough),
                ("aggregate", AGGREGATE, plain_aggregate),
                ("counter", COUNTER, plain_counter),
                ("join", JOIN, plain_join),
            ):
                if name not in CASES:
                    continue
                results[name] = bench.compare(bench.pipeline(compile_query(text)), plain(bench))
            spark.stop()
        out.write(json.dumps(results).encode() + b"\n")


if __name__ == "__main__":
    main()
