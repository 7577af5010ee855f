"""What Spark tells the runtime about its queries, pushed by a `StreamingQueryListener`.

Spark posts a progress event after each micro-batch finished, i.e. after the
sink committed the batch's SPU transaction, so by the time the runtime sees a
batch here its outputs are in the log and in the SPU batch ledger. The
listener only records (callbacks run on a py4j thread and must stay cheap);
the flow monitor takes the records on its own schedule. This replaces polling
`query.lastProgress`, a blocking JVM call that also skips batches finished
between two polls.

A progress event reaches Python as its JSON text, one py4j call
(`JsonProgressBridge`): PySpark's own bridge converts it field by field, a
py4j round trip per field, source and state operator, which with a micro-batch
every few hundred milliseconds was about a tenth of the runtime's CPU.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

import orjson
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener

from contraflow.spark.checkpoint import parse_offsets

log = logging.getLogger("contraflow.pipeline.spark.listener")

# Batches kept per run until the monitor takes them (it does every tick); beyond that the oldest go.
BACKLOG = 4096
# A query whose sink rows are not events (log-batch envelopes) observes the events it writes:
# `observedMetrics[OUTPUT_METRIC][OUTPUT_RECORDS]` (see `query._routed_rows`).
OUTPUT_METRIC = "contraflow_output"
OUTPUT_RECORDS = "records"
# A stateful query observes the events its envelopes carry into `transformWithState` (what partial
# aggregation leaves to cross the shuffle): `observedMetrics[SHUFFLE_METRIC][SHUFFLE_EVENTS]`.
SHUFFLE_METRIC = "contraflow_shuffle"
SHUFFLE_EVENTS = "events"
# A stateful query with windows closed by the watermark or joins observes the events each such node
# called late: `observedMetrics[LATE_METRIC][node name]`.
LATE_METRIC = "contraflow_late"


@dataclass(frozen=True)
class BatchProgress:
    """One finished micro-batch of a query run."""

    query_id: str  # stable across restarts: the sink's producer id in the SPU ledger
    run_id: str
    batch_id: int
    input_ends: tuple[dict[int, int], ...]  # per source, in plan order: partition -> next offset
    rows_in: int
    rows_out: int  # -1 when the sink does not say
    duration_s: float
    # Seconds of the batch per phase (`BATCH_PHASES`), so the next bottleneck shows in `/metrics`.
    phases: tuple[tuple[str, float], ...] = ()
    rows_shuffled: int = 0  # events carried into the stateful stage (0 for a stateless query)
    late: tuple[tuple[str, int], ...] = ()  # (node, events it called late in the batch), nonzero only


# Where a micro-batch's time goes, from Spark's progress: each phase adds up some of its
# `durationMs` entries; `state_commit` is the state stores' commit time summed over tasks.
BATCH_PHASES: dict[str, tuple[str, ...]] = {
    "offsets": ("latestOffset", "getBatch", "walCommit"),
    "planning": ("queryPlanning",),
    "execution": ("addBatch",),
    "commit": ("commitOffsets",),
}


def batch_phases(
    durations: dict[str, int] | None, state_operators: list[dict[str, Any]] | None
) -> tuple[tuple[str, float], ...]:
    """A progress's phase durations in seconds (see BATCH_PHASES), plus `state_commit`."""
    durations = durations or {}
    phases = [
        (name, sum(durations.get(key, 0) for key in keys) / 1000) for name, keys in BATCH_PHASES.items()
    ]
    commits = sum(op.get("commitTimeMs", 0) or 0 for op in state_operators or ())
    if state_operators:
        phases.append(("state_commit", commits / 1000))
    return tuple(phases)


def records_read(source: Any) -> int:
    """The records one source's progress says it read: its offsets' advance over every partition.

    Not `numInputRows`: a source that runs the pipeline's first step in its
    read task (see `contraflow.spark.transform`) yields envelopes, not events.
    A brand-new query's first batch has no start offset (null in the progress
    JSON): it counts from offset 0, where a new flow's channels begin. (Counting
    its `numInputRows` instead left a stateful pipeline's first batch counted in
    envelopes: w1 of hot_path read 2,980,020 of 3,000,000.) Takes a progress
    object or its JSON dict.
    """

    def field(name: str) -> Any:
        return source.get(name) if isinstance(source, dict) else getattr(source, name, None)

    start = field("startOffset")
    begin = parse_offsets(start) if start is not None else {}
    return sum(max(0, end - begin.get(p, 0)) for p, end in parse_offsets(field("endOffset")).items())


def batch_progress(progress: dict[str, Any]) -> BatchProgress:
    """The parts of a `StreamingQueryProgress` (as its JSON dict) the runtime uses."""
    sink = progress.get("sink") or {}
    observed = (progress.get("observedMetrics") or {}).get(OUTPUT_METRIC)
    rows_out = (observed.get(OUTPUT_RECORDS) or 0) if observed is not None else sink.get("numOutputRows", -1)
    shuffled = (progress.get("observedMetrics") or {}).get(SHUFFLE_METRIC) or {}
    late = (progress.get("observedMetrics") or {}).get(LATE_METRIC) or {}
    sources = progress.get("sources") or []
    return BatchProgress(
        query_id=str(progress["id"]),
        run_id=str(progress["runId"]),
        batch_id=int(progress["batchId"]),
        input_ends=tuple(parse_offsets(s.get("endOffset")) for s in sources),
        rows_in=sum(records_read(source) for source in sources),
        rows_out=int(rows_out if rows_out is not None else -1),
        rows_shuffled=int(shuffled.get(SHUFFLE_EVENTS) or 0),
        late=tuple((node, int(count)) for node, count in sorted(late.items()) if count),
        duration_s=(progress.get("durationMs") or {}).get("triggerExecution", 0) / 1000,
        phases=batch_phases(progress.get("durationMs"), progress.get("stateOperators")),
    )


class JsonProgressBridge(JStreamingQueryListener):
    """PySpark's bridge from the JVM's listener calls, but a progress event crosses as one JSON text."""

    pylistener: QueryListener

    def onQueryProgress(self, jevent: Any) -> None:
        self.pylistener.on_progress_json(jevent.progress().json())


class QueryListener(StreamingQueryListener):
    """Finished batches and failures of every query of one Spark session, by run id (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: dict[str, deque[BatchProgress]] = {}
        self._last_batch: dict[str, int] = {}
        self._ended: dict[str, str | None] = {}  # run id -> failure (None: stopped cleanly)

    # -- Spark's callbacks (py4j thread) -------------------------------------------------------

    def onQueryStarted(self, event: Any) -> None:
        pass

    @property
    def _jlistener(self) -> Any:
        """What `spark.streams.addListener` registers in the JVM: our bridge, not PySpark's."""
        from pyspark import SparkContext

        if not hasattr(self, "_bridge"):
            jvm = SparkContext._jvm
            assert jvm is not None, "no active Spark context"
            self._bridge = jvm.PythonStreamingQueryListenerWrapper(JsonProgressBridge(self))
        return self._bridge

    def onQueryProgress(self, event: Any) -> None:
        """PySpark's way in (the bridge above calls `on_progress_json` instead)."""
        self.on_progress_json(event.progress.json)

    def on_progress_json(self, progress: str) -> None:
        try:
            batch = batch_progress(orjson.loads(progress))
        except Exception:
            log.exception("unreadable query progress event")
            return
        with self._lock:
            if batch.batch_id <= self._last_batch.get(batch.run_id, -1):
                return  # reported twice: the first report already counts
            self._last_batch[batch.run_id] = batch.batch_id
            queue = self._batches.setdefault(batch.run_id, deque(maxlen=BACKLOG))
            if len(queue) == BACKLOG:  # a query the runtime does not watch (a watched one is read each tick)
                log.debug("query run %s: batch %d forgotten", batch.run_id, queue[0].batch_id)
            queue.append(batch)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._lock:
            self._ended[str(event.runId)] = event.exception

    # -- readers (any thread, never blocking on the JVM) ---------------------------------------

    def take(self, run_id: str) -> list[BatchProgress]:
        """The batches of `run_id` finished since the last call, oldest first."""
        with self._lock:
            queue = self._batches.get(run_id)
            if not queue:
                return []
            taken = list(queue)
            queue.clear()
            return taken

    def failure(self, run_id: str) -> str | None:
        """Why the run died, or None while it runs (or if it was stopped)."""
        with self._lock:
            return self._ended.get(run_id)

    def ended(self, run_id: str) -> bool:
        """Whether Spark reported the run's end: every progress of the run was delivered before it."""
        with self._lock:
            return run_id in self._ended

    def forget(self, run_id: str) -> None:
        """Drop what is kept about a run nobody will ask about again."""
        with self._lock:
            self._batches.pop(run_id, None)
            self._last_batch.pop(run_id, None)
            self._ended.pop(run_id, None)


_listeners: weakref.WeakKeyDictionary[Any, QueryListener] = weakref.WeakKeyDictionary()
_registering = threading.Lock()


def query_listener(spark: Any) -> QueryListener:
    """The session's listener, registered on first use (one per session, however many flows)."""
    with _registering:
        listener = _listeners.get(spark)
        if listener is None:
            listener = QueryListener()
            spark.streams.addListener(listener)
            _listeners[spark] = listener
        return listener
