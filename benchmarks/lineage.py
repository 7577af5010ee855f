"""What the flow monitor pays per pipeline and tick to learn about finished micro-batches.

- figure: the listener path, `PipelineRun.finished()` + `PipelineRun.error()`
  (a lock and a deque: what the monitor calls now);
- baseline, same run and query: the polling it replaced, `query.lastProgress`
  twice (progress and batch stats) + `query.exception()`, three py4j calls
  that each block a thread on the JVM;
- ratio = baseline / figure (how many times cheaper a tick's read is), medians
  over REPEATS rounds of CALLS calls, with a live query that ran a few batches.

Prints one JSON object. Run: PYTHONPATH=src python benchmarks/lineage.py
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CALLS = 200
REPEATS = 5
BATCHES = 5


def per_call_us(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    return (time.perf_counter() - start) / CALLS * 1e6


def main() -> None:
    from contraflow.pipeline.local import compile_query
    from contraflow.pipeline.spark.run import PipelineInput, start_pipeline_query
    from contraflow.spark import session
    from contraflow.spu.client import SpuClient
    from contraflow.spu.embedded import EmbeddedSpu
    from contraflow.spu.protocol.topics import TopicConfig

    work = Path(tempfile.mkdtemp(prefix="contraflow-lineage-"))
    with EmbeddedSpu(work / "spu", mode="thread") as spu:
        spark = session(master="local[2]", data_dir=work / "spark")
        client = SpuClient(spu.addr)
        for topic in ("bench.in", "bench.out"):
            client.create_topic(topic, TopicConfig(partitions=1))
        run = start_pipeline_query(
            spark,
            "bench",
            "pass",
            compile_query("select event from in into out;"),
            spu=spu.addr,
            inputs=[PipelineInput("in", "bench.in", "bench.pass.in")],
            outputs={"out": "bench.out"},
            data_dir=work,
            trigger="100 milliseconds",
        )
        seen = 0
        for n in range(BATCHES):
            client.produce("bench.in", 0, [b'{"n": %d}' % i for i in range(n * 100, n * 100 + 100)])
            run.query.processAllAvailable()
            time.sleep(0.2)  # the listener bus delivers the progress event asynchronously
            seen += len(run.finished())

        def listener() -> None:
            run.finished()
            run.error()

        def polling() -> None:
            _ = run.query.lastProgress
            _ = run.query.lastProgress
            run.query.exception()

        figure, baseline = [], []
        for _ in range(REPEATS):
            figure.append(per_call_us(listener))
            baseline.append(per_call_us(polling))
        run.stop()
        spark.stop()
        client.close()
    fig, base = statistics.median(figure), statistics.median(baseline)
    print(
        json.dumps(
            {
                "listener_read_us": round(fig, 2),
                "polling_read_us": round(base, 1),
                "ratio_polling_to_listener": round(base / fig, 1),
                "batches_reported": seen,
                "batches_run": BATCHES,
                "listener_us": [round(x, 2) for x in figure],
                "polling_us": [round(x, 1) for x in baseline],
            }
        )
    )


if __name__ == "__main__":
    main()
