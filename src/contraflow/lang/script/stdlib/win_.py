"""`std::win::` functions: facts about the window a windowed select is emitting.

A select sets `WINDOW.cardinality` just before it evaluates its target for a
closing window, so `win::cardinality()` reads it with no extra argument passed
through every generated call. Thread-local, because each thread runs its own
pipelines; outside a windowed select it reads 0.
"""

from __future__ import annotations

import threading

from contraflow.lang.script.stdlib import tremor_fn


class _WindowFacts(threading.local):
    cardinality = 0


WINDOW = _WindowFacts()


@tremor_fn("win::cardinality")
def cardinality() -> int:
    """How many groups the select holds now (0 without `group by`), as Tremor's `win::cardinality`."""
    return WINDOW.cardinality
