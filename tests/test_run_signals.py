"""`contraflow run`'s stop signals: the first Ctrl-C drains, a second one cuts the drain short."""

from __future__ import annotations

import asyncio
import io

from rich.console import Console

from contraflow.run_command import _on_stop_signal


def test_the_second_ctrl_c_cuts_the_drain_short() -> None:
    terminal = io.StringIO()
    console = Console(file=terminal, width=200)
    stop, cut_short = asyncio.Event(), asyncio.Event()
    _on_stop_signal(console, stop, cut_short)
    assert stop.is_set() and not cut_short.is_set()  # first: drain within the shutdown ceiling
    assert terminal.getvalue() == ""
    _on_stop_signal(console, stop, cut_short)
    assert cut_short.is_set()
    _on_stop_signal(console, stop, cut_short)  # a third says nothing new
    assert terminal.getvalue().count("stopping now: the drain is cut short") == 1
