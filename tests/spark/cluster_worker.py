"""Run a passthrough bridge query against a given Spark master and exit.

Usage: cluster_worker.py MASTER SPU SRC DST CHECKPOINT DATA_DIR
Prints the executors' count seen by the driver, then "done".
"""

from __future__ import annotations

import sys

from contraflow.spark import session


def main() -> None:
    master, spu, src, dst, checkpoint, data_dir = sys.argv[1:7]
    spark = session(
        master=master, data_dir=data_dir, **{"spark.executor.memory": "512m", "spark.cores.max": "2"}
    )
    stream = (
        spark.readStream.format("contraflow")
        .option("spu", spu)
        .option("topic", src)
        .option("maxRecordsPerTask", "50")
        .load()
    )
    query = (
        stream.selectExpr("upper(cast(value as string)) as value")
        .writeStream.format("contraflow")
        .option("spu", spu)
        .option("topic", dst)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
    print(f"executors {executors}", flush=True)
    spark.stop()
    print("done", flush=True)


if __name__ == "__main__":
    main()
