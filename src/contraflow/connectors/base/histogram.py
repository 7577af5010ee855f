"""A latency histogram with a fixed number of significant figures (HDR-style, bounded memory).

Values are kept per bucket of equal leading digits: with 2 significant figures
1234 and 1299 share the bucket 1200. Memory grows with the range of values
(about 90 buckets per decade at 2 figures), not with how many are recorded,
so a benchmark can run for hours.
"""

from __future__ import annotations

from collections import Counter


class Histogram:
    def __init__(self, significant_figures: int = 2) -> None:
        self.significant_figures = significant_figures
        self._buckets: Counter[int] = Counter()
        self.count = 0
        self.max = 0
        self.min: int | None = None

    def bucket(self, value: int) -> int:
        """`value` with only its leading `significant_figures` digits kept (the bucket's lower bound)."""
        if value <= 0:
            return 0
        scale = 10 ** max(len(str(value)) - self.significant_figures, 0)
        return value // scale * scale

    def record(self, value: int) -> None:
        self._buckets[self.bucket(value)] += 1
        self.count += 1
        self.max = max(self.max, value)
        self.min = value if self.min is None else min(self.min, value)

    def percentile(self, p: float) -> int:
        """The bucket holding the `p`-th percentile (0 < p <= 100); 0 when empty."""
        if not self.count:
            return 0
        rank = max(1, round(p / 100 * self.count))
        seen = 0
        for value in sorted(self._buckets):
            seen += self._buckets[value]
            if seen >= rank:
                return value
        return self.max

    def summary(self, percentiles: tuple[float, ...] = (50, 90, 99, 99.9)) -> dict[str, int]:
        out = {f"p{p:g}": self.percentile(p) for p in percentiles}
        out.update(min=self.min or 0, max=self.max, count=self.count)
        return out
