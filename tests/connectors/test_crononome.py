"""crononome: cron schedules with seconds in UTC, and the events they fire."""

from __future__ import annotations

import datetime as dt

import pytest

from contraflow.connectors.base import ConnectorConfigError
from contraflow.connectors.base.cron import CronError, CronSchedule
from tests.connectors.support import make, run

UTC = dt.UTC


def at(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=UTC)


def test_next_firing_follows_every_field() -> None:
    every_second = CronSchedule.parse("* * * * * *")
    assert every_second.next_after(at(2026, 1, 1, 0, 0, 0)) == at(2026, 1, 1, 0, 0, 1)
    # Every 15 s from second 5, in minutes 10-12, at 23 h: past 12 minutes it rolls to the next day.
    steps = CronSchedule.parse("5/15 10-12 23 * * *")
    assert steps.next_after(at(2026, 1, 1, 23, 10, 50)) == at(2026, 1, 1, 23, 11, 5)
    assert steps.next_after(at(2026, 1, 1, 23, 12, 50)) == at(2026, 1, 2, 23, 10, 5)
    # Names, lists and the day of week (1 = Sunday): noon on Mondays and Fridays of February 2026.
    named = CronSchedule.parse("0 0 12 * Feb MON,6")
    assert named.next_after(at(2026, 1, 31)) == at(2026, 2, 2, 12)  # 2026-02-02 is a Monday
    assert named.next_after(at(2026, 2, 2, 12)) == at(2026, 2, 6, 12)  # then Friday
    # A year field, and a date that only comes around in leap years.
    assert CronSchedule.parse("0 0 0 29 2 * 2026-2030").next_after(at(2026, 1, 1)) == at(2028, 2, 29)
    assert CronSchedule.parse("0 0 0 1 1 * 2020").next_after(at(2026, 1, 1)) is None
    # Times given in another zone are compared in UTC: 02:30 at +02:00 is 00:30 UTC, before 01:00 UTC.
    plus_two = dt.timezone(dt.timedelta(hours=2))
    one_am = CronSchedule.parse("0 0 1 * * *")
    assert one_am.next_after(dt.datetime(2026, 1, 1, 2, 30, tzinfo=plus_two)) == at(2026, 1, 1, 1)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("* * * * *", "has 5 fields"),
        ("61 * * * * *", "second: '61' is outside 0-59"),
        ("* * * * FOO *", "month: 'FOO' is not a number or a name"),
        ("*/0 * * * * *", "second: step '0' must be at least 1"),
    ],
)
def test_bad_expressions_say_which_field(expr: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        CronSchedule.parse(expr)


def test_due_entries_fire_events_with_their_payload_in_tremors_shape() -> None:
    config = {
        "entries": [
            {"name": "every", "expr": "* * * * * *", "payload": {"snot": "badger"}},
            {"name": "never", "expr": "0 0 0 1 1 * 2099"},
        ]
    }

    async def body() -> list:
        conn = make("crononome", config)
        await conn.connect()
        item = await conn.pull()
        assert item is not None and item.events is not None
        return item.events

    [(event, meta)] = run(body())
    assert event["connector"] == "crononome" and event["id"] == 0
    assert event["trigger"] == {"name": "every", "payload": {"snot": "badger"}}
    assert meta == {"crononome": {"trigger": "every"}}


def test_entries_are_checked_when_the_flow_loads() -> None:
    with pytest.raises(ConnectorConfigError, match=r"'entries\[0\].expr' is not a cron schedule"):
        make("crononome", {"entries": [{"name": "x", "expr": "snot snot"}]})
    with pytest.raises(ConnectorConfigError, match="missing config key 'entries'"):
        make("crononome", {})
