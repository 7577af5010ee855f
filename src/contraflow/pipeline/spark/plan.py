"""What a pipeline's Spark query needs in its Python workers, as one picklable value.

Spark pickles the functions it runs on executors; keeping everything they need
(graph, port-to-topic maps, ingest mode) in one frozen dataclass makes that
explicit, and lets a worker that runs many tasks compile the graph once
(`executor()` caches by the plan's fingerprint).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pickle
import traceback
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from contraflow.events import Event, decode_value
from contraflow.lang.graph import PipelineGraph, SourceExpr
from contraflow.pipeline.analysis import has_qos, has_timers
from contraflow.pipeline.columnar import ColumnarPlan
from contraflow.pipeline.python.staged import StagedPlan, columnar_plan
from contraflow.pipeline.signals import apply_signals

IngestMode = Literal["timestamp", "offset"]
DEFAULT_EXECUTOR = "contraflow.pipeline.executor:PipelineExecutor"
COLUMNAR_SWITCH = "CONTRAFLOW_COLUMNAR"

_executors: dict[str, Any] = {}
_initial_states: dict[str, dict[str, Any]] = {}
_columnar: dict[str, ColumnarPlan | StagedPlan | None] = {}


@dataclass(frozen=True)
class PipelinePlan:
    """A compiled pipeline bound to its topics.

    `ingest` picks each event's ingest time: the record's log timestamp
    (`timestamp`, the normal case) or its offset (`offset`: the input position,
    for deterministic interval windows). Timers (the pipeline tick) only run
    in `timestamp` mode, where ingest time and wall-clock time agree.
    """

    graph: PipelineGraph
    flow: str
    name: str
    inputs: dict[str, str | list[str]]  # port -> topic(s): a fan-in port reads several
    outputs: dict[str, str]
    ingest: IngestMode = "timestamp"
    executor_class: str = DEFAULT_EXECUTOR
    spu: str | None = None  # where the runtime publishes QoS signals (see `signals`)
    # An available-now run: it ends once its input is read, so it has no timers (see `ticks`).
    finite: bool = False
    # The time mode a runtime checkpoint keeps (`time_mode.query_has_timers`); None: `has_timers`.
    timers: bool | None = None

    @cached_property
    def fingerprint(self) -> str:
        return hashlib.sha256(pickle.dumps((self.graph.to_dict(), self.flow, self.name))).hexdigest()

    @property
    def ticks(self) -> bool:
        """Whether the query needs processing-time timers.

        Only pipelines with something timed (interval windows, batch timeouts)
        get them: a `transformWithState` in processing-time mode runs a
        micro-batch on every trigger even without input, which would make an
        untimed pipeline spin (and `processAllAvailable` never return).

        A `finite` run has none either: Spark ends an available-now run only
        after a micro-batch whose stateful operators ask for no other, and a
        `transformWithState` in processing-time mode always asks (Spark 4.3's
        `TransformWithStateExecBase.shouldRunAnotherBatch`), so the run would
        never end. A finite run is a replay of a backlog anyway: windows close
        on the events' own ingest times, as `run_local` closes them, not on when
        the replay happens to run; what is still open at the end stays in the
        state, for the caller to fire (`contraflow query` does, with
        `contraflow.pipeline.local.finish`).
        """
        timers = has_timers(self.graph) if self.timers is None else self.timers
        return not self.finite and self.ingest == "timestamp" and timers

    @cached_property
    def qos(self) -> bool:
        """Whether the pipeline routes by runtime-published signals (then read before each batch)."""
        return has_qos(self.graph)

    def apply_signals(self, executor: Any) -> None:
        """Hand `executor` the QoS signals the runtime last published for this pipeline."""
        if self.qos:
            apply_signals(executor, self.spu, self.name)

    def new_executor(self) -> Any:
        module, attr = self.executor_class.split(":")
        cls = getattr(importlib.import_module(module), attr)
        return cls(self.graph, flow=self.flow, name=self.name)

    def executor(self) -> Any:
        """This worker's executor for the plan (compiled once per worker process).

        Stateful callers must `restore` every node before use: the executor is
        shared by every task and key the worker runs.
        """
        key = f"{self.executor_class}/{self.fingerprint}"
        executor = _executors.get(key)
        if executor is None:
            fresh = self.new_executor()
            _initial_states[key] = fresh.snapshot()
            executor = _executors[key] = fresh
        return executor

    def columnar(self, port: str, also_read: tuple[SourceExpr, ...] = ()) -> ColumnarPlan | StagedPlan | None:
        """This worker's columnar plan for events entering `port` (compiled once), or None when the
        graph does not vectorize there, is stateful, routes by QoS signals or uses another executor
        (staged around the graph's `python::batch` nodes: `contraflow.pipeline.python.staged`).
        `also_read`: expressions a later stage evaluates on the outputs (their fields get parsed too).

        `CONTRAFLOW_COLUMNAR=off` in the workers' environment keeps every batch on the per-event
        executor (to compare, or to rule the columnar path out)."""
        if os.environ.get(COLUMNAR_SWITCH, "on") == "off":  # read each time: the switch is not cached
            return None
        key = f"{self.executor_class}/{self.fingerprint}/{port}/" + "/".join(e.source for e in also_read)
        if key not in _columnar:
            eligible = self.executor_class == DEFAULT_EXECUTOR and not self.graph.stateful and not self.qos
            asts = [e.ast for e in also_read]
            _columnar[key] = columnar_plan(self.graph, port, asts) if eligible else None
        return _columnar[key]

    def initial_state(self) -> dict[str, Any]:
        """Every stateful node's state before any event: what a node without stored state restores."""
        self.executor()
        return _initial_states[f"{self.executor_class}/{self.fingerprint}"]


def failure_event(error: BaseException, event: Event) -> Event:
    """An `err` event for an exception the executor did not turn into one itself.

    The executor reports script and codec errors as `err` events; this is the
    last line of defence that keeps a Spark query alive on anything else.
    """
    try:
        original: Any = decode_value(event.raw) if event.raw is not None else event.value
    except ValueError:
        original = (event.raw or b"").decode("utf-8", "replace")
    frame = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    return Event(
        {
            "error": f"{type(error).__name__}: {error}",
            "node": None,
            "position": f"{frame.filename}:{frame.lineno}" if frame else None,
            "event": original,
        },
        dict(event.meta),
        None,
        event.origin,
    )
