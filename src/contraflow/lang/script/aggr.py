"""Aggregate functions for Trickle windows: `aggr::stats::*` and `aggr::win::*`.

Each aggregate is a small class with Tremor's lifecycle: `init` (start a new
window), `accumulate(*args)` per event, `merge(other)` to fold a finished
window into the next tilt frame, and `emit()` for the window's value.
`snapshot()`/`restore()` turn the running state into plain JSON-able values
so the Spark executor can keep it in a state store.
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
    name = "aggr::stats::min"

    def init(self) -> None:
        self.value: Any = None

    def accumulate(self, *args: Any) -> None:
        x = want(args[0], _NUM, self.name)
        if self.value is None or values.lt(x, self.value):
            self.value = x

    def merge(self, other: Min) -> None:
        if other.value is not None:
            self.accumulate(other.value)

    def emit(self) -> Any:
        return self.value


class Max(Min):
    name = "aggr::stats::max"

    def accumulate(self, *args: Any) -> None:
        x = want(args[0], _NUM, self.name)
        if self.value is None or values.gt(x, self.value):
            self.value = x


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


DEFAULT_PERCENTILES = ("0.5", "0.9", "0.95", "0.99", "0.999", "0.9999")


class Hdr(Aggregate):
    """Count, min, max, mean, stdev, var and percentiles (exact, nearest rank) of the values.

    `aggr::stats::hdr(value[, ["0.5", "0.99"]])`: percentiles are given as strings, as in Tremor.
    """

    name = "aggr::stats::hdr"
    max_args = 2

    def init(self) -> None:
        self.samples: list[Any] = []
        self.percentiles: list[str] = list(DEFAULT_PERCENTILES)

    def accumulate(self, *args: Any) -> None:
        self.samples.append(want(args[0], _NUM, self.name))
        if len(args) > 1:
            wanted = want(args[1], list, self.name, "percentiles")
            self.percentiles = [want(p, str, self.name, "percentile") for p in wanted]

    def merge(self, other: Hdr) -> None:
        self.samples.extend(other.samples)

    def emit(self) -> Any:
        data = sorted(self.samples)
        var = Var()
        for x in data:
            var.accumulate(x)
        out: dict[str, Any] = {
            "count": len(data),
            "min": data[0] if data else None,
            "max": data[-1] if data else None,
            "mean": var.mean if data else None,
            "stdev": math.sqrt(var.emit()),
            "var": var.emit(),
            "percentiles": {},
        }
        for p in self.percentiles:
            q = float(p)
            if not data:
                out["percentiles"][p] = None
                continue
            rank = max(1, math.ceil(q * len(data)))
            out["percentiles"][p] = data[min(rank, len(data)) - 1]
        return out


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


class Last(First):
    name = "aggr::win::last"

    def accumulate(self, *args: Any) -> None:
        self.value, self.seen = args[0], True

    def merge(self, other: First) -> None:
        if other.seen:
            self.value, self.seen = other.value, True


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


AGGREGATES: dict[str, type[Aggregate]] = {
    cls.name: cls
    for cls in (Count, Sum, Min, Max, Mean, Var, Stdev, Hdr, First, Last, CollectFlattened, CollectNested)
}


def lookup_aggregate(name: str) -> type[Aggregate] | None:
    """The aggregate called `name` (`aggr::stats::count`, or without the `aggr::` prefix)."""
    if not name.startswith("aggr::"):
        name = "aggr::" + name
    return AGGREGATES.get(name)
