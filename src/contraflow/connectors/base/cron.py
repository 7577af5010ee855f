"""Cron schedules with seconds, in UTC, as Tremor's `crononome` reads them.

An expression has six or seven fields: `second minute hour day-of-month
month day-of-week [year]`. Each field is `*` (or `?`), a value, a range
`a-b`, any of these with a step (`*/5`, `10-40/10`, `3/15`: from 3 on),
or a comma-separated list of them. Months and days of the week may be
named (`JAN`..`DEC`, `SUN`..`SAT`, any case); days of the week count from
1 = Sunday to 7 = Saturday. A time matches when every field matches (day
of month *and* day of week, as Tremor's cron library does).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
WEEKDAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
LAST_YEAR = 2099

# (name, lowest, highest, names counted from `lowest`)
_FIELDS: list[tuple[str, int, int, list[str]]] = [
    ("second", 0, 59, []),
    ("minute", 0, 59, []),
    ("hour", 0, 23, []),
    ("day of month", 1, 31, []),
    ("month", 1, 12, MONTHS),
    ("day of week", 1, 7, WEEKDAYS),
    ("year", 1970, LAST_YEAR, []),
]


class CronError(ValueError):
    """An expression that is not a schedule; the message says which field and why."""


@dataclass(frozen=True)
class CronSchedule:
    """The allowed values of each field; `next_after` finds the next matching second."""

    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 1 = Sunday
    years: frozenset[int]

    @classmethod
    def parse(cls, expr: str) -> CronSchedule:
        parts = expr.split()
        if len(parts) not in (6, 7):
            raise CronError(
                f"'{expr}' has {len(parts)} fields; a schedule has 6 or 7: "
                "second minute hour day-of-month month day-of-week [year]"
            )
        if len(parts) == 6:
            parts.append("*")
        return cls(*(_field(text, *spec) for text, spec in zip(parts, _FIELDS, strict=True)))

    def matches(self, when: dt.datetime) -> bool:
        return (
            when.year in self.years
            and when.month in self.months
            and self._day_matches(when)
            and when.hour in self.hours
            and when.minute in self.minutes
            and when.second in self.seconds
        )

    def _day_matches(self, when: dt.datetime) -> bool:
        return when.day in self.days and (when.isoweekday() % 7 + 1) in self.weekdays

    def next_after(self, when: dt.datetime) -> dt.datetime | None:
        """The first matching whole second strictly after `when` (UTC); None if there is none left."""
        t = when.astimezone(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=1)
        while t.year <= LAST_YEAR:
            if t.year not in self.years:
                t = dt.datetime(t.year + 1, 1, 1, tzinfo=dt.UTC)
            elif t.month not in self.months:
                t = _next_month(t)
            elif not self._day_matches(t):
                t = dt.datetime(t.year, t.month, t.day, tzinfo=dt.UTC) + dt.timedelta(days=1)
            elif t.hour not in self.hours:
                t = t.replace(minute=0, second=0) + dt.timedelta(hours=1)
            elif t.minute not in self.minutes:
                t = t.replace(second=0) + dt.timedelta(minutes=1)
            elif t.second not in self.seconds:
                t += dt.timedelta(seconds=1)
            else:
                return t
        return None


def _next_month(t: dt.datetime) -> dt.datetime:
    if t.month == 12:
        return dt.datetime(t.year + 1, 1, 1, tzinfo=dt.UTC)
    return dt.datetime(t.year, t.month + 1, 1, tzinfo=dt.UTC)


def _field(text: str, name: str, low: int, high: int, names: list[str]) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        span, _, step_text = item.partition("/")
        step = _number(step_text, name, names, low) if step_text else 1
        if step < 1:
            raise CronError(f"{name}: step '{step_text}' must be at least 1")
        if span in ("*", "?"):
            start, end = low, high
        elif "-" in span:
            first, _, last = span.partition("-")
            start, end = _number(first, name, names, low), _number(last, name, names, low)
        else:
            start = _number(span, name, names, low)
            end = high if step_text else start
        if not low <= start <= end <= high:
            raise CronError(f"{name}: '{item}' is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


def _number(text: str, field: str, names: list[str], low: int) -> int:
    upper = text.strip().upper()
    if upper in names:
        return names.index(upper) + low
    try:
        return int(upper)
    except ValueError:
        raise CronError(f"{field}: '{text}' is not a number{' or a name' if names else ''}") from None
