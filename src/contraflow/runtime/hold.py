"""Why a flow's connectors are held: open breakers downstream, QoS pauses, back-pressure, a user's pause.

Each reason is its own key on the connector's `Gate`, so lifting one never
lifts another. Breakers are per sink and per cause (`BreakerCause`): the
runtime's own (the connection is lost, or not up yet) and the connector's
(`ctx.open_breaker`: e.g. every request slot busy) are independent, so a
connector freeing a slot cannot close a breaker a lost connection holds open.
A source is held by the open sinks it cannot route around (`Routes`: a
`qos::roundrobin` with an output still available absorbs the others).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping
from typing import NamedTuple

from contraflow.runtime.gate import Gate
from contraflow.runtime.routes import Routes

PAUSED = "paused"


class BreakerCause(enum.Enum):
    """Who opened a sink's breaker."""

    CONNECTION = "breaker"  # the runtime: the sink's connection is lost, or not up yet
    CAPACITY = "capacity"  # the connector itself, e.g. all its request slots busy
    DISK_FULL = "disk_full"  # a source: the SPU refused its append for a full disk (runtime/disk_full.py)


class Breaker(NamedTuple):
    """One cause holding one sink's breaker open; `gate_key` is what it holds gates by."""

    sink: str
    cause: BreakerCause

    @property
    def gate_key(self) -> str:
        return f"{self.cause.value}:{self.sink}"


def backpressure_key(channel: str) -> str:
    """The gate key back-pressure on `channel` holds its producer by."""
    return f"backpressure:{channel}"


class HoldPolicy:
    """Turns breaker changes and QoS pauses into holds on the connectors' gates.

    `gates` and `sources` are the flow's (connector alias -> gate, the aliases
    that are sources); the flow fills them as it builds its connectors.
    """

    def __init__(self, routes: Routes, gates: Mapping[str, Gate], sources: Collection[str]) -> None:
        self.routes = routes
        self.gates = gates
        self.sources = sources
        self.open: dict[Breaker, str] = {}  # breaker -> why it is open
        self._breaker_holds: dict[str, set[Breaker]] = {}  # connector -> breakers holding its gate
        self._qos_holds: set[str] = set()  # gate keys of running `method = "pause"` back-offs

    # -- breakers --------------------------------------------------------------------------

    def breakers(self) -> dict[str, str]:
        """Sink alias -> why its breaker is open (every cause's reason), for the open sinks only."""
        reasons: dict[str, list[str]] = {}
        for breaker, why in self.open.items():
            reasons.setdefault(breaker.sink, []).append(why)
        return {sink: "; ".join(whys) for sink, whys in reasons.items()}

    def is_open(self, sink: str) -> bool:
        return any(breaker.sink == sink for breaker in self.open)

    def set_breaker(self, breaker: Breaker, is_open: bool, why: str) -> frozenset[str]:
        """Open (or close) one cause of a sink's breaker and re-hold the connectors it stops;
        returns the open sinks."""
        if is_open:
            self.open[breaker] = why
        else:
            self.open.pop(breaker, None)
        return self.apply_breakers()

    def apply_breakers(self) -> frozenset[str]:
        """Hold each connector by the open breakers it cannot route around; returns the open sinks."""
        open_sinks = frozenset(breaker.sink for breaker in self.open)
        routes = self.routes.with_open(open_sinks)
        for alias, gate in self.gates.items():
            blockers = routes.of_source(alias) - {alias}
            wanted = {breaker: why for breaker, why in self.open.items() if breaker.sink in blockers}
            for breaker in self._breaker_holds.get(alias, set()) - wanted.keys():
                gate.release(breaker.gate_key)
            for breaker, why in wanted.items():
                gate.hold(breaker.gate_key, f"breaker open: {breaker.sink} {why}")
            self._breaker_holds[alias] = set(wanted)
        return open_sinks

    # -- QoS pauses, back-pressure, pause ----------------------------------------------------

    def apply_qos_pauses(
        self, paused: Mapping[str, tuple[str, int]], feeding: Callable[[str], Collection[str]], now_ns: int
    ) -> None:
        """Hold the sources feeding a pipeline whose `qos::backpressure` (`method = "pause"`) backs off.

        `paused` is the QoS feed's gate key -> (pipeline, until ns); `feeding(pipeline)`
        names the connectors that feed it.
        """
        for key in self._qos_holds - paused.keys():
            for gate in self.gates.values():
                gate.release(key)
        for key, (pipeline, until_ns) in paused.items():
            why = (
                f"qos back-off in {key.removeprefix('qos:')} for {max(0, until_ns - now_ns) // 1_000_000} ms"
            )
            for alias in feeding(pipeline):
                if alias in self.sources:
                    self.gates[alias].hold(key, why)
        self._qos_holds = set(paused)

    def backpressure(self, producer: str, channel: str, stop: bool, why: str) -> None:
        """Hold (or release) the connector producing into `channel` while the channel is full."""
        gate = self.gates[producer]
        if stop:
            gate.hold(backpressure_key(channel), why)
        else:
            gate.release(backpressure_key(channel))

    def pause(self, alias: str, paused: bool) -> None:
        """A user's pause of one connector (the API's, or the whole flow's)."""
        if paused:
            self.gates[alias].hold(PAUSED, "paused")
        else:
            self.gates[alias].release(PAUSED)
