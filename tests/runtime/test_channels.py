"""Channel names: Troy names unchanged, everything else escaped one-to-one into the topic charset."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contraflow.runtime.channels import ChannelNameError, channel_topic, consumer_name
from contraflow.spu.protocol.topics import validate_topic_name


def test_troy_names_read_as_written() -> None:
    assert channel_topic("main", "events", "out") == "main.events.out"
    assert consumer_name("main", "classify", "in") == "main.classify.in"


def test_dots_and_dashes_cannot_collide() -> None:
    assert channel_topic("a.b", "c", "out") != channel_topic("a", "b.c", "out")
    assert channel_topic("a-2eb", "c", "out") != channel_topic("a.b", "c", "out")


@given(st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=12))
def test_any_name_is_a_valid_distinct_topic(flow: str, alias: str) -> None:
    topic = channel_topic(flow, alias, "out")
    assert validate_topic_name(topic) == topic
    assert topic.count(".") == 2
    assert (channel_topic(flow + "x", alias, "out") != topic) and (channel_topic(flow, alias, "err") != topic)


def test_too_long_names_are_user_errors() -> None:
    with pytest.raises(ChannelNameError, match="249"):
        channel_topic("f" * 200, "a" * 60, "out")
    with pytest.raises(ChannelNameError, match="empty"):
        consumer_name("", "a", "in")
