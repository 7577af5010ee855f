"""Aggregate functions for Trickle windows: `aggr::stats::*` and `aggr::win::*`.

Each aggregate is a small class with Tremor's lifecycle: `init` (start a new
window), `accumulate(*args)` per event, `merge(other)` to fold a finished
window into the next tilt frame, and `emit()` for the window's value.
`snapshot()`/`restore()` turn the running state into plain JSON-able values
so the Spark executor can keep it in a state store.

Aggregates whose folding is exact also define a *partial*: a run of events'
contribution as a plain JSON value (`add_to_partial` per event, starting from
`EMPTY_PARTIAL`), which `absorb` folds into a running aggregate with exactly
the result of accumulating those events one by one (order, types and rounding
included). Spark pre-aggregates a batch with it before the shuffle (see
`contraflow.pipeline.spark.partial`). Float sums are left out: a sum split in
two rounds differently from the sum in one sequence.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Self

from contraflow.lang.script import values
from contraflow.lang.script.stdlib._check import want

_NUM = (int, float)


class Aggregate(ABC):
    """One running aggregate for one group of one window."""

    name: ClassVar[str]
    min_args: ClassVar[int] = 1
    max_args: ClassVar[int] = 1

    def __init__(self) -> None:
        self.init()

    @abstractmethod
    def init(self) -> None:
        """Reset to the empty aggregate."""

    @abstractmethod
    def accumulate(self, *args: Any) -> None:
        """Add one event's argument values."""

    @abstractmethod
    def merge(self, other: Self) -> None:
        """Fold `other` (same class, a finished smaller window) into this one."""

    @abstractmethod
    def emit(self) -> Any:
        """The aggregate's value."""

    def snapshot(self) -> Any:
        return dict(vars(self))

    # -- partial aggregation (only where `partial_exact`) -------------------------------------

    partial_exact: ClassVar[bool] = False
    EMPTY_PARTIAL: ClassVar[Any] = None

    @classmethod
    def add_to_partial(cls, partial: Any, *args: Any) -> Any:
        """`partial` with one more event's arguments (a new value; `partial` is left as it was).
        Raises where `accumulate` would, and for a value the partial cannot carry exactly."""
        raise NotImplementedError(f"{cls.name} has no exact partial")

    def absorb(self, partial: Any) -> None:
        """Fold a partial in: the same state as accumulating its events one by one."""
        raise NotImplementedError(f"{self.name} has no exact partial")

    @classmethod
    def restore(cls, data: Any) -> Self:
        agg = cls()
        vars(agg).update(data)
        return agg


class Count(Aggregate):
    name = "aggr::stats::count"
    min_args = 0

    def init(self) -> None:
        self.n = 0

    def accumulate(self, *args: Any) -> None:
        self.n += 1

    def merge(self, other: Count) -> None:
        self.n += other.n

    def emit(self) -> Any:
        return self.n

    partial_exact = True
    EMPTY_PARTIAL = 0

    @classmethod
    def add_to_partial(cls, partial: Any, *args: Any) -> Any:
        return partial + 1

    def absorb(self, partial: Any) -> None:
        self.n += partial


class Sum(Aggregate):
    """A float, as in Tremor (its sum accumulates in f64): integers sum to `6.0`."""

    name = "aggr::stats::sum"

    def init(self) -> None:
        self.total = 0.0

    def accumulate(self, *args: Any) -> None:
        self.total += want(args[0], _NUM, self.name)

    def merge(self, other: Sum) -> None:
        self.total += other.total

    def emit(self) -> Any:
        return self.total


class Min(Aggregate):
    """A float, as in Tremor (it keeps an f64); 0.0 for an empty window."""

    name = "aggr::stats::min"

    # Whether a new value replaces the kept one (strictly: of equal values the first stays).
    replaces = staticmethod(values.lt)

    def init(self) -> None:
        self.value: Any = None

    def accumulate(self, *args: Any) -> None:
        x = want(args[0], _NUM, self.name)
        if self.value is None or self.replaces(x, self.value):
            self.value = x

    def merge(self, other: Min) -> None:
        if other.value is not None:
            self.accumulate(other.value)

    def emit(self) -> Any:
        return 0.0 if self.value is None else float(self.value)

    # The partial is the run's own extreme (its first of equal values): folding it in gives what
    # the run's values one by one would, since the order is total over finite numbers.
    partial_exact = True

    @classmethod
    def add_to_partial(cls, partial: Any, *args: Any) -> Any:
        x = _exact_number(want(args[0], _NUM, cls.name))
        return x if partial is None or cls.replaces(x, partial) else partial

    def absorb(self, partial: Any) -> None:
        if partial is not None:
            self.accumulate(partial)


class Max(Min):
    name = "aggr::stats::max"
    replaces = staticmethod(values.gt)


class Mean(Aggregate):
    name = "aggr::stats::mean"

    def init(self) -> None:
        self.n = 0
        self.total = 0.0

    def accumulate(self, *args: Any) -> None:
        self.n += 1
        self.total += want(args[0], _NUM, self.name)

    def merge(self, other: Mean) -> None:
        self.n += other.n
        self.total += other.total

    def emit(self) -> Any:
        return self.total / self.n if self.n else None


class Var(Aggregate):
    """Sample variance (n - 1 denominator), by Welford's method; merges with Chan's formula."""

    name = "aggr::stats::var"

    def init(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0

    def accumulate(self, *args: Any) -> None:
        x = float(want(args[0], _NUM, self.name))
        self.n += 1
        delta = x - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (x - self.mean)

    def merge(self, other: Var) -> None:
        if other.n == 0:
            return
        n = self.n + other.n
        delta = other.mean - self.mean
        self.mean += delta * other.n / n
        self.m2 += other.m2 + delta * delta * self.n * other.n / n
        self.n = n

    def emit(self) -> Any:
        return self.m2 / (self.n - 1) if self.n > 1 else 0.0


class Stdev(Var):
    name = "aggr::stats::stdev"

    def emit(self) -> Any:
        return math.sqrt(super().emit())


DEFAULT_PERCENTILES = ("0.5", "0.9", "0.95", "0.99", "0.999", "0.9999", "0.99999")


class _Percentiles(Aggregate):
    """What `hdr` and `dds` share: the value plus an optional array of percentile strings."""

    max_args = 2

    def init(self) -> None:
        self.percentiles: list[str] = list(DEFAULT_PERCENTILES)

    def _value(self, args: tuple[Any, ...]) -> float | int | None:
        """The event's value, None when negative (Tremor's histograms skip those)."""
        if len(args) > 1:
            wanted = want(args[1], list, self.name, "percentiles")
            self.percentiles = [want(p, str, self.name, "percentile") for p in wanted]
        value = want(args[0], _NUM, self.name)
        return None if value < 0 else value


class Hdr(_Percentiles):
    """Tremor's HDR histogram summary: count, min, max, mean, stdev, var and percentiles.

    `aggr::stats::hdr(value[, ["0.5", "0.99"]])`. As in Tremor, values are
    recorded as whole non-negative integers, stdev is the population one and
    var its square, and a percentile is the nearest-rank value (exact here; a
    real HDR histogram with 2 significant digits rounds values above 255).
    """

    name = "aggr::stats::hdr"

    def init(self) -> None:
        super().init()
        self.samples: list[int] = []

    def accumulate(self, *args: Any) -> None:
        value = self._value(args)
        if value is not None:
            self.samples.append(int(value))

    def merge(self, other: Hdr) -> None:
        self.samples.extend(other.samples)

    def emit(self) -> Any:
        data = sorted(self.samples)
        n = len(data)
        mean = sum(data) / n if n else 0.0
        var = sum((x - mean) ** 2 for x in data) / n if n else 0.0
        return {
            "count": n,
            "min": data[0] if n else 0,
            "max": data[-1] if n else 0,
            "mean": mean,
            "stdev": math.sqrt(var),
            "var": var,
            "percentiles": {
                p: data[min(n, max(1, math.ceil(float(p) * n))) - 1] if n else 0 for p in self.percentiles
            },
        }


# DDSketch with the `sketches-ddsketch` defaults Tremor uses: 1% relative accuracy.
_DDS_ALPHA = 0.01
_DDS_GAMMA = 1 + 2 * _DDS_ALPHA / (1 - _DDS_ALPHA)
_DDS_GAMMA_LN = math.log1p(2 * _DDS_ALPHA / (1 - _DDS_ALPHA))
_DDS_MIN_VALUE = 1.0e-9


class Dds(_Percentiles):
    """Tremor's `aggr::stats::dds`: a DDSketch (relative-error quantiles) with count, sum, min,
    max, mean and percentiles, each percentile rounded up to one decimal as Tremor does.

    Values fall into logarithmic bins of ratio gamma; a quantile is the bin's
    representative value `2 * gamma^key / (1 + gamma)`, within 1% of the truth.
    """

    name = "aggr::stats::dds"

    def init(self) -> None:
        super().init()
        self.bins: dict[str, int] = {}  # str keys: the snapshot is JSON
        self.zeros = 0
        self.count = 0
        self.total = 0.0
        self.low = 0.0  # meaningful once `count` > 0 (no infinities: the snapshot is JSON)
        self.high = 0.0

    def accumulate(self, *args: Any) -> None:
        value = self._value(args)
        if value is None:
            return
        value = float(value)
        self.low, self.high = (min(self.low, value), max(self.high, value)) if self.count else (value, value)
        self.count += 1
        self.total += value
        if value < _DDS_MIN_VALUE:
            self.zeros += 1
        else:
            key = str(math.ceil(math.log(value) / _DDS_GAMMA_LN))
            self.bins[key] = self.bins.get(key, 0) + 1

    def merge(self, other: Dds) -> None:
        for key, n in other.bins.items():
            self.bins[key] = self.bins.get(key, 0) + n
        if other.count:
            self.low, self.high = (
                (min(self.low, other.low), max(self.high, other.high))
                if self.count
                else (other.low, other.high)
            )
        self.zeros += other.zeros
        self.count += other.count
        self.total += other.total

    def _quantile(self, q: float) -> float:
        if q <= 0:
            return self.low
        if q >= 1:
            return self.high
        rank = int(q * (self.count - 1))
        if rank < self.zeros:
            return 0.0
        seen = self.zeros
        for key in sorted(int(k) for k in self.bins):
            seen += self.bins[str(key)]
            if seen > rank:
                return 2 * _DDS_GAMMA**key / (1 + _DDS_GAMMA)
        return self.high

    def emit(self) -> Any:
        if not self.count:
            return {
                "count": 0,
                "sum": 0.0,
                "min": 0.0,
                "max": 0.0,
                "mean": 0.0,
                "percentiles": dict.fromkeys(self.percentiles, 0.0),
            }
        return {
            "count": self.count,
            "sum": self.total,
            "min": self.low,
            "max": self.high,
            "mean": self.total / self.count,
            "percentiles": {p: math.ceil(self._quantile(float(p)) * 10) / 10 for p in self.percentiles},
        }


class First(Aggregate):
    name = "aggr::win::first"

    def init(self) -> None:
        self.value: Any = None
        self.seen = False

    def accumulate(self, *args: Any) -> None:
        if not self.seen:
            self.value, self.seen = args[0], True

    def merge(self, other: First) -> None:
        if not self.seen and other.seen:
            self.value, self.seen = other.value, True

    def emit(self) -> Any:
        return self.value

    # The partial is [the run's first value] (None for no event); only scalars, which JSON
    # carries exactly (an array or record falls back to the event itself).
    partial_exact = True

    @classmethod
    def add_to_partial(cls, partial: Any, *args: Any) -> Any:
        return partial if partial is not None else [_exact_scalar(args[0])]

    def absorb(self, partial: Any) -> None:
        if partial is not None:
            self.accumulate(partial[0])


class Last(First):
    name = "aggr::win::last"

    def accumulate(self, *args: Any) -> None:
        self.value, self.seen = args[0], True

    def merge(self, other: First) -> None:
        if other.seen:
            self.value, self.seen = other.value, True

    @classmethod
    def add_to_partial(cls, partial: Any, *args: Any) -> Any:
        return [_exact_scalar(args[0])]


class CollectFlattened(Aggregate):
    """Every value, in order; merging concatenates."""

    name = "aggr::win::collect_flattened"

    def init(self) -> None:
        self.items: list[Any] = []

    def accumulate(self, *args: Any) -> None:
        self.items.append(args[0])

    def merge(self, other: CollectFlattened) -> None:
        self.items.extend(other.items)

    def emit(self) -> Any:
        return list(self.items)


class CollectNested(CollectFlattened):
    """Every value, in order; merging a finished window adds it as one nested array."""

    name = "aggr::win::collect_nested"

    def merge(self, other: CollectFlattened) -> None:
        self.items.append(other.emit())


# JSON integers a partial carries (orjson's range).
_INT_RANGE = (-(2**63), 2**64 - 1)


class InexactPartial(ValueError):
    """A value a partial cannot carry exactly: that event is aggregated on its own."""


def _exact_number(x: Any) -> Any:
    """`x` if JSON carries it exactly and it orders totally (no NaN, no infinities)."""
    if type(x) is float and not math.isfinite(x):
        raise InexactPartial(f"non-finite number {x!r}")
    if type(x) is int and not _INT_RANGE[0] <= x <= _INT_RANGE[1]:
        raise InexactPartial("integer out of JSON range")
    return x


def _exact_scalar(x: Any) -> Any:
    """`x` if it is a scalar JSON carries exactly (a string, a finite number, a bool or null)."""
    if x is None or type(x) is str or type(x) is bool:
        return x
    if type(x) is int or type(x) is float:
        return _exact_number(x)
    raise InexactPartial(f"{type(x).__name__} value")


AGGREGATES: dict[str, type[Aggregate]] = {
    cls.name: cls
    for cls in (
        Count,
        Sum,
        Min,
        Max,
        Mean,
        Var,
        Stdev,
        Hdr,
        Dds,
        First,
        Last,
        CollectFlattened,
        CollectNested,
    )
}


def lookup_aggregate(name: str) -> type[Aggregate] | None:
    """The aggregate called `name` (`aggr::stats::count`, or without the `aggr::` prefix)."""
    if not name.startswith("aggr::"):
        name = "aggr::" + name
    return AGGREGATES.get(name)
