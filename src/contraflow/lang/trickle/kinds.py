"""The operator and window kinds Trickle knows, with the `with` parameters each accepts.

The checker validates `define operator`/`define window` against this table so a
typo in a kind or a parameter is reported at compile time with a hint, instead
of failing when the pipeline starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class OperatorKind:
    """An operator kind: its accepted/required config keys, output ports, and whether it keeps state."""

    name: str
    params: frozenset[str] = frozenset()
    required: frozenset[str] = frozenset()
    outputs: tuple[str, ...] = ("out", "err")
    stateful: bool = False
    # A config key whose list value names extra output ports (qos::roundrobin `outputs`).
    port_param: str | None = None
    # Config keys whose values must be strings.
    string_params: frozenset[str] = frozenset()


PYTHON_REQUIRED = frozenset({"module", "function"})
PYTHON_PARAMS = PYTHON_REQUIRED | {"args"}
PYTHON_KINDS = frozenset({"python::map", "python::batch"})

WITH_OVERFLOW = ("out", "err", "overflow")


def _qos_gate(name: str, *params: str) -> OperatorKind:
    """A QoS gate governed by round trips against its required `timeout` (ms); it sheds to `overflow`."""
    return OperatorKind(
        name, frozenset({"timeout", *params}), frozenset({"timeout"}), outputs=WITH_OVERFLOW, stateful=True
    )


OPERATORS: dict[str, OperatorKind] = {
    op.name: op
    for op in (
        OperatorKind("passthrough"),
        # Tremor's tracing operator: appends "evt: <op>(<id>)" to the metadata array `$[name]`.
        OperatorKind(
            "debug::history",
            frozenset({"op", "name"}),
            frozenset({"op", "name"}),
            string_params=frozenset({"op", "name"}),
        ),
        OperatorKind("generic::counter", stateful=True),
        OperatorKind("generic::batch", frozenset({"count", "timeout"}), frozenset({"count"}), stateful=True),
        OperatorKind("grouper::bucket", outputs=WITH_OVERFLOW, stateful=True),
        OperatorKind("qos::roundrobin", frozenset({"outputs"}), stateful=True, port_param="outputs"),
        _qos_gate("qos::backpressure", "steps", "method"),
        _qos_gate("qos::percentile", "step_up", "step_down"),
        # User operators written in Python (`contraflow.pipeline.python`). Both keep `ctx.state`
        # per instance, so they run where state lives; a `python::batch` whose function cannot
        # reach its state is marked stateless when its pipeline starts (`python.state_use`).
        *(
            OperatorKind(name, PYTHON_PARAMS, PYTHON_REQUIRED, stateful=True, string_params=PYTHON_REQUIRED)
            for name in sorted(PYTHON_KINDS)
        ),
    )
}


@dataclass(frozen=True)
class WindowKind:
    name: str
    params: frozenset[str] = field(
        default_factory=lambda: frozenset(
            {"size", "interval", "max_groups", "emit_empty_windows", "state", "lateness"}
        )
    )


WINDOW_KINDS: dict[str, WindowKind] = {
    "tumbling": WindowKind("tumbling"),
    # Beyond Tremor: the last `size` events (or `interval` ns), emitted every `slide` events (or ns).
    "sliding": WindowKind("sliding", frozenset({"size", "interval", "slide", "max_groups", "lateness"})),
    # Beyond Tremor: one window per group and burst of events, closed `gap` ns after its last event.
    "session": WindowKind("session", frozenset({"gap", "max_duration", "lateness", "max_groups"})),
}

# Ports every select/stream/script node has; scripts may also `emit => "port"` to any name.
DEFAULT_INPUTS = ("in",)
DEFAULT_OUTPUTS = ("out", "err")
