"""A pipeline as a Spark query in its own process (own local Spark), for the crash tests.

Usage: pipeline_worker.py SPU INPUT_TOPIC OUTPUT_TOPIC CHECKPOINT DATA_DIR [PIPELINE]
Runs PIPELINE (`counter`, the pipeline-state RFC counter, then a python::map counting
again in its own state and a python::batch summing the counts in its own, by default; `route`,
a routing-only pipeline)
until killed (the Python module is found on CONTRAFLOW_PATH, `PYTHON_MODULES`). The test restarts the same query
(`start_query`) from the checkpoint in its own Spark session.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from contraflow.pipeline.local import compile_query
from contraflow.pipeline.spark.query import start_pipeline
from tests.pipeline.spark.harness import RFC_COUNTER

PYTHON_MODULES = Path(__file__).parents[1] / "python_modules"
PYTHON_COUNTER = """
define operator py_counter from python::map with module = "pyops_udfs", function = "counter" end;
define operator py_total from python::batch
with module = "pyops_udfs", function = "running_total", args = {"field": "count"} end;
create operator py_counter;
create operator py_total;
select event from counter into py_counter;
select event from py_counter into py_total;
select event from py_total into out;
"""
PIPELINES = {
    "counter": RFC_COUNTER.replace("select event from counter into out;", PYTHON_COUNTER),
    "route": "select event from in into out;",
}


def start_query(
    spark: Any, spu: str, source: str, sink: str, checkpoint: str, pipeline: str = "counter"
) -> Any:
    """The query, started the same way by the worker and by the test that restarts it."""
    return start_pipeline(
        spark,
        compile_query(PIPELINES[pipeline]),
        spu=spu,
        inputs={"in": source},
        outputs={"out": sink},
        checkpoint=checkpoint,
        name=f"crash-{pipeline}",
        consumer=f"crash-{pipeline}",
        trigger="100 milliseconds",
    )


def main() -> None:
    from contraflow.spark import session

    spu, source, sink, checkpoint, data_dir = sys.argv[1:6]
    pipeline = sys.argv[6] if len(sys.argv) > 6 else "counter"
    spark = session(master="local[2]", data_dir=data_dir)
    query = start_query(spark, spu, source, sink, checkpoint, pipeline)
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
