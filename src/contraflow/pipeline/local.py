"""Running a pipeline over JSON lines in this process: the reference for `contraflow query`.

`run_local` feeds each line to the `in` port and collects what every output
port emits. Ingest times are the line's position (`index`: 0, 1, 2, ...) or
the wall clock (`now`). When the input ends, processing time moves on to the
latest timer pending at that moment, so interval windows and batch timeouts
open at the end still emit once (as if the query kept running until then).
The Spark runner (`contraflow query`) must give the same results.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from contraflow.events import Event
from contraflow.lang.errors import SourceText
from contraflow.lang.graph import PipelineGraph
from contraflow.lang.troy.compiler import TroyCompiler
from contraflow.pipeline.executor import PipelineExecutor

Ingest = Literal["index", "now"]
Output = dict[str, list[Event]]


def compile_query(text: str, name: str = "query.trickle", directory: Path | None = None) -> PipelineGraph:
    """Compile Trickle source (a `.trickle` file's contents) into its pipeline graph."""
    return TroyCompiler().compile_query(SourceText(name, text), directory or Path.cwd())


def run_local(
    graph: PipelineGraph,
    lines: Iterable[str | bytes],
    ingest: Ingest = "index",
    port: str = "in",
    flush: bool = True,
) -> Output:
    """Run `graph` over JSON lines (blank lines skipped); returns output port -> events, in order.

    With `flush=False` the timers pending at the end do not fire: only what the
    events themselves emitted is returned (how Tremor's own query tests run).
    """
    executor = PipelineExecutor(graph)
    out: Output = {p: [] for p in graph.outputs}
    index = 0
    for line in lines:
        raw = line.encode() if isinstance(line, str) else line
        if not raw.strip():
            continue
        now = index if ingest == "index" else time.time_ns()
        for p, event in executor.process(port, Event.from_raw(raw.strip()), now):
            out[p].append(event)
        index += 1
    for p, event in finish(executor) if flush else ():
        out[p].append(event)
    return out


def finish(executor: PipelineExecutor) -> list[tuple[str, Event]]:
    """Advance processing time to the last timer pending now, so each fires once; returns what they emit."""
    last = executor.last_deadline_ns()
    return executor.tick(last) if last is not None else []
