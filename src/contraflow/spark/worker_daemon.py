"""Spark's Python worker daemon, with the modules every contraflow task needs imported before it forks.

Spark runs each Python task in a worker forked from one daemon process per
executor. PySpark's own daemon imports nothing: each fresh worker imports
PySpark's worker code, pandas, pyarrow and contraflow's pipeline code
when it unpickles its first function, which measured 5 s of a first
micro-batch's 15 on a loaded 2-core box. This daemon imports them once;
workers inherit them with the fork (`spark.python.daemon.module`, set by
`contraflow.spark.session` for local masters).

PySpark leaves the imports to the workers because some libraries start
threads on import, and a fork copies no threads. Of the modules imported
here only numpy (OpenBLAS's pool) and pyarrow (jemalloc's background thread)
start one, and both libraries prepare for a fork (pthread_atfork) and start
theirs again in the child when needed.
"""

from __future__ import annotations

import contextlib

with contextlib.suppress(ImportError):  # a worker imports whatever is missing itself
    import pyspark.sql.pandas.serializers  # noqa: F401
    import pyspark.worker  # noqa: F401

    import contraflow.pipeline.spark.stateful  # noqa: F401
    import contraflow.pipeline.spark.stateless  # noqa: F401
    import contraflow.spark.datasource  # noqa: F401

import gc

import pyarrow
from pyspark.daemon import manager

from contraflow.heap import keep_freed_heap

if __name__ == "__main__":
    # What the imports built lives as long as the workers: collections need not rescan it.
    gc.freeze()
    # The workers inherit the heap's settings with the fork (see `contraflow.heap`), and Arrow
    # allocates from that heap too: its own allocator (mimalloc) gave freed pages back to the
    # system and faulted them in again for every batch's concatenations and takes.
    if keep_freed_heap():
        pyarrow.set_memory_pool(pyarrow.system_memory_pool())
    manager()
