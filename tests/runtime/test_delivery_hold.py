"""DeliveryHold: a holding sink's offsets advance only with its releases, never past what it was handed."""

from __future__ import annotations

import pytest

from contraflow.runtime.delivery_hold import DeliveryHold


def test_offsets_follow_the_releases_in_order_and_never_pass_what_was_handed_over() -> None:
    commits: dict[str, list[int]] = {"a": [], "b": []}
    hold = DeliveryHold()
    hold.watch("a", 10, commits["a"].append)
    hold.watch("b", 0, commits["b"].append)
    hold.take("a", 20)
    hold.take("b", 5)
    hold.release({"a": 14})
    hold.release({"a": 12, "b": 4, "elsewhere": 3})  # behind a's release: nothing; unknown channel: nothing
    assert commits == {"a": [15], "b": [5]}
    assert hold.taken_of("a") == 20 and hold.taken_of("never") == 0
    with pytest.raises(ValueError, match="release of a up to 20: only 20 handed over"):
        hold.release({"a": 20})
