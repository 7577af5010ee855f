"""Per-flow runtime settings from the flow's args: channel bounds, pipeline triggers, appends, delivery, acks.

Troy's `connect` statement has no `with` block, so a flow sets these through
reserved args (defaults in the `define flow ... args`, overridden per
deployment with `deploy flow x from f with ... end`):

    channels = {
      "default":    {"capacity": 3000000, "capacity_bytes": 805306368,
                     "high_watermark": 1.0, "low_watermark": 0.5},
      "events/out": {"capacity": 500}          # the channel events leave `events` by on `out`
    },
    pipelines = {
      "default": {"trigger_ms": 250},          # a micro-batch every 250 ms (unset: 100, timers 500)
      "windows": {"trigger_ms": 0},            # a pipeline by its alias; 0: back to back
      "copy": {"route_in_log": 0}              # a routing-only pipeline as a Spark query anyway
    },
    appends = {"linger_ms": 20},               # how long sources' appends wait to leave together
    delivery = {"retries": 5, "backoff_ms": 100, "max_backoff_ms": 5000},
    ack = "delivered",                         # or "persisted"
    priority = "normal",                       # critical, high, normal, low, background
    cancel = {"ceiling_s": 10,                 # undeploy never takes longer
              "shutdown_ceiling_s": 120},      # nor Ctrl-C/SIGTERM (unset: ceiling_s, else 120)
    watchdog = {"batch_deadline_ms": 30000, "send_deadline_ms": 10000, "pull_deadline_ms": 0}

A channel key is `producer_alias/port`, a pipeline key its alias; unknown keys are user errors.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, TypeVar

from contraflow.api.facade import Priority
from contraflow.backoff import first_waits
from contraflow.errors import UserError

AckMode = Literal["delivered", "persisted"]
PRIORITIES: tuple[Priority, ...] = ("critical", "high", "normal", "low", "background")
T = TypeVar("T")
# Untimed pipelines: the wait it adds at low rates is smaller than what the 10 ms idle polls cost a
# busy box (benchmarks/flows.py: no slower at 200 events/s, half the CPU of an idle flow).
DEFAULT_TRIGGER_MS = 100


class SettingsError(UserError):
    """A reserved flow arg (`channels`, `delivery`, `ack`) has a wrong shape or value."""


@dataclass(frozen=True)
class ChannelSettings:
    """Bounds of one channel: back-pressure starts at `high_watermark` x capacity and ends below `low`."""

    # Large because a pipeline's source stops at the capacity counting the micro-batch in flight:
    # batches under a backlog settle near 0.4 of it, and the `normal` admission (1.2M, see
    # `runtime.priority`) is only reached with 3M (docs/runtime.md, "Admission under a backlog").
    capacity: int = 3_000_000
    capacity_bytes: int = 768 << 20
    high_watermark: float = 1.0
    low_watermark: float = 0.5

    def __post_init__(self) -> None:
        if self.capacity < 1 or self.capacity_bytes < 1:
            raise SettingsError("channel capacity and capacity_bytes must be positive")
        if not 0 < self.low_watermark < self.high_watermark <= 1:
            raise SettingsError(
                "channel watermarks need 0 < low_watermark < high_watermark <= 1, got "
                f"low {self.low_watermark}, high {self.high_watermark}"
            )

    @property
    def high(self) -> int:
        """Depth (events) at which the producer stops."""
        return max(1, int(self.capacity * self.high_watermark))

    @property
    def low(self) -> int:
        """Depth (events) below which a stopped producer resumes."""
        return int(self.capacity * self.low_watermark)

    def full(self, depth: int, depth_bytes: int) -> bool:
        """At the high watermark in events or in bytes: the producer stops."""
        return depth >= self.high or depth_bytes >= max(1, int(self.capacity_bytes * self.high_watermark))

    def drained(self, depth: int, depth_bytes: int) -> bool:
        """Below the low watermark in events and in bytes: a stopped producer resumes."""
        return depth < self.low and depth_bytes < int(self.capacity_bytes * self.low_watermark)


@dataclass(frozen=True)
class PipelineSettings:
    """When a pipeline's Spark query starts its micro-batches.

    Unset (`None`), a pipeline without timers starts a batch every
    DEFAULT_TRIGGER_MS, one with timers (interval windows, batch timeouts)
    every 500 ms, its tick. `trigger_ms = 0` starts the next batch as soon as
    the last one ended and input is there, which makes Spark poll the input
    every 10 ms while idle: a call into its Python source runner and two SPU
    requests each time, about 0.2 of a core per idle pipeline here. A
    positive `trigger_ms` starts a batch every that many milliseconds (at
    once after one that overran, so under load it changes nothing).

    `route_in_log` (1 by default): the outputs of a routing-only pipeline are
    aliases of its inputs, read where the events already are, with no query
    (`runtime.aliases`); 0 runs it as a Spark query. A pipeline keeps the way
    it first ran (its query's checkpoint or its alias mark decides).
    """

    trigger_ms: int | None = None
    route_in_log: int = 1

    def __post_init__(self) -> None:
        if self.trigger_ms is not None and self.trigger_ms < 0:
            raise SettingsError(f"pipeline trigger_ms must be >= 0, got {self.trigger_ms}")

    def trigger(self, timers: bool) -> str | None:
        """The processing-time interval for Spark, or None for back to back (timers: their tick)."""
        trigger_ms = self.trigger_ms
        if trigger_ms is None:
            trigger_ms = 0 if timers else DEFAULT_TRIGGER_MS
        return f"{trigger_ms} milliseconds" if trigger_ms else None


@dataclass(frozen=True)
class AppendSettings:
    """How the flow's sources batch their appends to channel topics.

    Records wait up to `linger_ms` to leave together. At 10k events/s a 2 ms
    linger meant ~500 small append requests a second, more than the busy
    runtime and SPU answered: events piled up before the channel and the flow
    fell behind; 20 ms kept up, with p50 1.7 s against 2.2-3.0 s
    (benchmarks/flows.py side by side). Sources that resume from a position
    (`file`) append each pull as one request and never linger.
    """

    linger_ms: float = 20.0

    def __post_init__(self) -> None:
        if self.linger_ms < 0:
            raise SettingsError(f"appends linger_ms must be >= 0, got {self.linger_ms}")


@dataclass(frozen=True)
class DeliverySettings:
    """How often and how patiently a sink retries a batch that failed with a retryable error."""

    retries: int = 5
    backoff_ms: float = 100.0
    max_backoff_ms: float = 5000.0

    def delays(self) -> list[float]:
        """Seconds to wait before each retry (exponential, capped)."""
        return first_waits(self.retries, self.backoff_ms / 1000, self.max_backoff_ms / 1000)


UNDEPLOY_CEILING_S = 10.0
# Ctrl-C/SIGTERM give a flow this long by default. The classify example stopped right after it
# started drains in its stateful pipeline's first micro-batch: 64 s on the 2-core box at load 16,
# 87 s at load 30 (docs/operations.md); the 7 s of 10 s left for the drain cut that short. A
# second Ctrl-C stops at once.
SHUTDOWN_CEILING_S = 120.0


@dataclass(frozen=True)
class CancelSettings:
    """`cancel`: the ceiling for stopping the whole flow (its tiers share it, see `runtime.cancellation`).

    Undeploy and `DELETE /v1/flows/{id}` get `ceiling_s` (unset: 10 s). Shutdown (Ctrl-C,
    SIGTERM, the `exit` connector) gets `shutdown_ceiling_s`, unset: `ceiling_s` if that is set,
    else SHUTDOWN_CEILING_S. Shutdown is when a person waits for the drain to finish cleanly; a
    second Ctrl-C cuts it short."""

    ceiling_s: float | None = None
    shutdown_ceiling_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("ceiling_s", "shutdown_ceiling_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise SettingsError(f"cancel {name} must be > 0, got {value}")

    def ceiling(self, shutdown: bool) -> float:
        """Seconds stopping the flow may take: for a shutdown of the runtime, or an undeploy."""
        if shutdown:
            return self.shutdown_ceiling_s or self.ceiling_s or SHUTDOWN_CEILING_S
        return self.ceiling_s or UNDEPLOY_CEILING_S


@dataclass(frozen=True)
class WatchdogSettings:
    """`watchdog`: how long a micro-batch, a sink's send or a source's pull may take before it is
    reported; 0 turns a check off. Pulls are off by default: many sources (servers, `null`) wait in
    `pull()` for input that may be long in coming."""

    batch_deadline_ms: float = 30_000.0
    send_deadline_ms: float = 10_000.0
    pull_deadline_ms: float = 0.0

    def __post_init__(self) -> None:
        if min(self.batch_deadline_ms, self.send_deadline_ms, self.pull_deadline_ms) < 0:
            raise SettingsError("watchdog deadlines must be >= 0 (0: off)")


@dataclass(frozen=True)
class FlowSettings:
    """Everything the runtime reads from a flow's reserved args."""

    channels: Mapping[str, ChannelSettings]
    default_channel: ChannelSettings
    delivery: DeliverySettings
    ack: AckMode
    pipelines: Mapping[str, PipelineSettings] = field(default_factory=dict)
    default_pipeline: PipelineSettings = PipelineSettings()
    appends: AppendSettings = AppendSettings()
    priority: Priority = "normal"
    cancel: CancelSettings = CancelSettings()
    watchdog: WatchdogSettings = WatchdogSettings()

    def channel(self, name: str) -> ChannelSettings:
        """Settings of the channel `producer_alias/port`."""
        return self.channels.get(name, self.default_channel)

    def pipeline(self, alias: str) -> PipelineSettings:
        """Settings of the pipeline instance `alias`."""
        return self.pipelines.get(alias, self.default_pipeline)

    @classmethod
    def from_args(
        cls,
        flow_id: str,
        args: Mapping[str, Any],
        channel_names: set[str],
        pipeline_names: Collection[str] = (),
    ) -> FlowSettings:
        default, channels = _named(flow_id, "channels", ChannelSettings(), args, channel_names)
        default_pipeline, pipelines = _named(flow_id, "pipelines", PipelineSettings(), args, pipeline_names)
        delivery = _build(DeliverySettings(), args.get("delivery") or {}, f"flow '{flow_id}' delivery")
        ack = args.get("ack", "delivered")
        if ack not in ("delivered", "persisted"):
            raise SettingsError(f'flow \'{flow_id}\': `ack` must be "delivered" or "persisted", not {ack!r}')
        appends = _build(AppendSettings(), args.get("appends") or {}, f"flow '{flow_id}' appends")
        priority = args.get("priority", "normal")
        if priority not in PRIORITIES:
            raise SettingsError(
                f"flow '{flow_id}': `priority` must be one of {', '.join(map(repr, PRIORITIES))}, not {priority!r}"
            )
        cancel = _build(CancelSettings(), args.get("cancel") or {}, f"flow '{flow_id}' cancel")
        watchdog = _build(WatchdogSettings(), args.get("watchdog") or {}, f"flow '{flow_id}' watchdog")
        return cls(
            channels, default, delivery, ack, pipelines, default_pipeline, appends, priority, cancel, watchdog
        )


def _named(
    flow_id: str, arg: str, base: T, args: Mapping[str, Any], names: Collection[str]
) -> tuple[T, dict[str, T]]:
    """A reserved arg of per-name settings: (its `default` over `base`, each named entry over that)."""
    raw_all = args.get(arg) or {}
    kind = arg.rstrip("s")
    if not isinstance(raw_all, Mapping):
        raise SettingsError(f"flow '{flow_id}': `{arg}` must be a record of {kind} settings")
    default: T = _build(base, raw_all.get("default", {}), f"flow '{flow_id}' {arg}.default")
    named: dict[str, T] = {}
    for name, raw in raw_all.items():
        if name == "default":
            continue
        if name not in names:
            known = ", ".join(sorted(names)) or "none"
            raise SettingsError(f"flow '{flow_id}': no {kind} '{name}' ({arg}: {known})")
        named[name] = _build(default, raw, f"flow '{flow_id}' {arg}.{name}")
    return default, named


def _build(base: Any, raw: Any, where: str) -> Any:
    """`base` with the keys of record `raw` replaced, each checked against the dataclass fields."""
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{where} must be a record")
    known = {f.name: str(f.type) for f in fields(base)}
    for key, value in raw.items():
        if key not in known:
            raise SettingsError(f"{where}: unknown key '{key}' (known: {', '.join(sorted(known))})")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SettingsError(f"{where}.{key} must be a number, got {value!r}")
    try:
        return replace(base, **{k: (float(v) if "float" in known[k] else int(v)) for k, v in raw.items()})
    except SettingsError as err:
        raise SettingsError(f"{where}: {err}") from None
