"""A stateful pipeline as a Spark query in its own process (own local Spark), for the crash test.

Usage: pipeline_worker.py SPU INPUT_TOPIC OUTPUT_TOPIC CHECKPOINT DATA_DIR
Runs the pipeline-state RFC counter until killed. The test restarts the same
query (`start_counter`) from the checkpoint in its own Spark session.
"""

from __future__ import annotations

import sys
from typing import Any

from contraflow.pipeline.local import compile_query
from contraflow.pipeline.spark.query import start_pipeline
from tests.pipeline.spark.harness import RFC_COUNTER


def start_counter(spark: Any, spu: str, source: str, sink: str, checkpoint: str) -> Any:
    """The counter query, started the same way by the worker and by the test that restarts it."""
    return start_pipeline(
        spark,
        compile_query(RFC_COUNTER),
        spu=spu,
        inputs={"in": source},
        outputs={"out": sink},
        checkpoint=checkpoint,
        name="crash-counter",
        consumer="crash-counter",
        trigger="100 milliseconds",
    )


def main() -> None:
    from contraflow.spark import session

    spu, source, sink, checkpoint, data_dir = sys.argv[1:6]
    query = start_counter(session(master="local[2]", data_dir=data_dir), spu, source, sink, checkpoint)
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
