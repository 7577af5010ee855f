"""The runtime half of `qos::backpressure` and `qos::percentile`: turning delivery feedback into signals.

The operators in the executor only read what the runtime publishes with
`PipelineExecutor.signal(node, value)`. These governors compute that value
from contraflow feedback (an acknowledged event's round-trip time, or a
failure), with Tremor's rules, so the runtime does not reimplement them:

- backpressure: a failure, or a round trip slower than `timeout` (ms), backs
  off for the next of `steps` (ms); each further one takes the next, longer
  step; a timely success resets the back-off.
- percentile: a failure or slow round trip lowers the fraction of events let
  through by `step_down`; a timely success raises it by `step_up` (within 0..1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contraflow.lang.graph import OperatorSpec

DEFAULT_STEPS_MS = (50, 100, 250, 500, 1000, 5000, 10000)
DEFAULT_STEP_UP = 0.001
DEFAULT_STEP_DOWN = 0.1
NS_PER_MS = 1_000_000


@dataclass
class BackpressureGovernor:
    """Back-off for one `qos::backpressure` node; `observe` returns its new signal."""

    timeout_ms: float
    steps_ms: tuple[int, ...] = DEFAULT_STEPS_MS
    step: int = -1  # index into steps_ms of the current back-off; -1 = none
    until_ns: int = 0

    @classmethod
    def from_spec(cls, spec: OperatorSpec) -> BackpressureGovernor:
        steps = spec.config.get("steps")
        return cls(float(spec.config["timeout"]), tuple(steps) if steps else DEFAULT_STEPS_MS)

    def observe(self, now_ns: int, latency_ms: float | None = None, failed: bool = False) -> dict[str, Any]:
        """Feedback for one delivered (or failed) event at `now_ns`."""
        if failed or (latency_ms is not None and latency_ms > self.timeout_ms):
            self.step = min(self.step + 1, len(self.steps_ms) - 1)
            self.until_ns = now_ns + self.steps_ms[self.step] * NS_PER_MS
        else:
            self.step = -1
        return self.signal()

    def signal(self) -> dict[str, Any]:
        return {"backoff_until_ns": self.until_ns}


@dataclass
class PercentileGovernor:
    """The pass fraction of one `qos::percentile` node; `observe` returns its new signal."""

    timeout_ms: float
    step_up: float = DEFAULT_STEP_UP
    step_down: float = DEFAULT_STEP_DOWN
    perc: float = field(default=1.0)

    @classmethod
    def from_spec(cls, spec: OperatorSpec) -> PercentileGovernor:
        config = spec.config
        return cls(
            float(config["timeout"]),
            float(config.get("step_up", DEFAULT_STEP_UP)),
            float(config.get("step_down", DEFAULT_STEP_DOWN)),
        )

    def observe(self, latency_ms: float | None = None, failed: bool = False) -> dict[str, Any]:
        """Feedback for one delivered (or failed) event."""
        if failed or (latency_ms is not None and latency_ms > self.timeout_ms):
            self.perc = max(0.0, self.perc - self.step_down)
        else:
            self.perc = min(1.0, self.perc + self.step_up)
        return self.signal()

    def signal(self) -> dict[str, Any]:
        return {"perc": self.perc}
