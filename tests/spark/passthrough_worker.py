"""A streaming passthrough query in its own process, for crash tests.

Usage: passthrough_worker.py SPU SRC DST CHECKPOINT DATA_DIR
Runs until killed, or until the source is drained when DRAIN=1 is set. Each micro-batch
reads up to MAX_OFFSETS records (150 by default).
"""

from __future__ import annotations

import os
import sys

from contraflow.spark import session


def main() -> None:
    spu, src, dst, checkpoint, data_dir = sys.argv[1:6]
    spark = session(master="local[2]", data_dir=data_dir)
    stream = (
        spark.readStream.format("contraflow")
        .option("spu", spu)
        .option("topic", src)
        .option("maxOffsetsPerTrigger", os.environ.get("MAX_OFFSETS", "150"))
        .option("consumer", "crash-test")
        .load()
    )
    query = (
        stream.select("value")
        .writeStream.format("contraflow")
        .option("spu", spu)
        .option("topic", dst)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="50 milliseconds")
        .start()
    )
    print("started", flush=True)
    if os.environ.get("DRAIN") == "1":
        query.processAllAvailable()
        query.stop()
        print("drained", flush=True)
    else:
        query.awaitTermination()


if __name__ == "__main__":
    main()
