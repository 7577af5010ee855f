"""Windows (tumbling, sliding, session): checking `define window` and the tilt frames a select chains them into."""

from __future__ import annotations

from typing import Any

from contraflow.lang.errors import Position
from contraflow.lang.graph import WindowSpec
from contraflow.lang.trickle import ast
from contraflow.lang.trickle.binding import bind_args, evaluate_expr, evaluate_params
from contraflow.lang.trickle.diagnostics import Diagnostics, did_you_mean
from contraflow.lang.trickle.kinds import WINDOW_KINDS

Params = dict[str, tuple[ast.Assignment, Any]]


def window_spec(diag: Diagnostics, stmt: ast.DefineWindow, env: dict[str, Any]) -> WindowSpec | None:
    """A window's parameters, checked: a known kind and exactly one of `size`/`interval`."""
    kind = WINDOW_KINDS.get(stmt.kind.value)
    if kind is None:
        diag.unknown("window kind", stmt.kind.value, stmt.kind.pos, WINDOW_KINDS)
        return None
    args = bind_args(diag, f"window '{stmt.name.value}'", stmt.args, [], env, stmt.name)
    params = evaluate_params(diag, stmt.params, {**env, "args": args})
    unknown = [key for key in params if key not in kind.params]
    for key in unknown:
        diag.error(
            f"unknown parameter '{key}' for {kind.name} window",
            params[key][0].name.pos,
            did_you_mean(key, kind.params),
        )
    spec = WindowSpec(
        stmt.name.value,
        kind.name,
        size=_positive_int(diag, params, "size"),
        interval_ns=_positive_int(diag, params, "interval"),
        max_groups=_positive_int(diag, params, "max_groups"),
        emit_empty_windows=bool(params["emit_empty_windows"][1]) if "emit_empty_windows" in params else False,
        script=stmt.script,
        slide=_positive_int(diag, params, "slide"),
        lateness_ns=_non_negative_int(diag, params, "lateness"),
        gap_ns=_positive_int(diag, params, "gap"),
        max_duration_ns=_positive_int(diag, params, "max_duration"),
    )
    if kind.name == "session":
        _check_session(diag, stmt, params)
        return spec
    if "lateness" in params and "interval" not in params:
        diag.error(
            f"window '{stmt.name.value}' has `lateness` but no `interval`",
            params["lateness"][0].name.pos,
            "lateness applies to time windows: `with interval = ..., lateness = ... end`",
        )
    if kind.name == "sliding":
        _check_slide(diag, stmt, params, spec)
    if _state_window(diag, stmt, params, spec, {**env, "args": args}):
        return spec
    if not unknown and "size" not in params and "interval" not in params:
        diag.error(
            f"window '{stmt.name.value}' needs `size` (events) or `interval` (nanoseconds)",
            stmt.name.pos,
            "e.g. `with size = 100 end` or `with interval = nanos::from_seconds(1) end`",
        )
    elif "size" in params and "interval" in params:
        diag.error(
            f"window '{stmt.name.value}' sets both `size` and `interval`",
            params["interval"][0].name.pos,
            f"a {kind.name} window counts events or measures time, not both",
        )
    return spec


def _check_session(diag: Diagnostics, stmt: ast.DefineWindow, params: Params) -> None:
    """A session window closes `gap` ns after its last event: `gap` is required."""
    if "gap" not in params:
        diag.error(
            f"session window '{stmt.name.value}' needs `gap` (nanoseconds without events that end a session)",
            stmt.name.pos,
            "e.g. `with gap = core::datetime::with_seconds(30) end`",
        )
    if stmt.state is not None:
        diag.error("a session window cannot have a `state`", stmt.state.position or stmt.name.pos)


def _state_window(
    diag: Diagnostics, stmt: ast.DefineWindow, params: Params, spec: WindowSpec, env: dict[str, Any]
) -> bool:
    """A state window (`state <initial>` or Tremor 0.11's `with state = ...`): checked and set up.

    Its script decides per event (`emit`, or `[emit, include]`), so it needs one
    and takes neither `size` nor `interval`. False when this is not a state window.
    """
    if stmt.state is None and "state" not in params:
        return False
    at = stmt.state.position if stmt.state is not None and stmt.state.position else stmt.name.pos
    if stmt.state is not None and "state" in params:
        diag.error("the initial state is given twice", params["state"][0].name.pos, "keep the `state` clause")
    for key in ("size", "interval"):
        if key in params:
            diag.error(
                f"a state window cannot also have `{key}`",
                params[key][0].name.pos,
                "only one of `size`, `interval` or `state` decides when a window closes",
            )
    if stmt.script is None:
        diag.error(
            f"state window '{stmt.name.value}' needs a `script`",
            at,
            "e.g. `state 0 script let state = state + 1; state % 10 == 0 end`",
        )
    spec.has_state = True
    spec.state = evaluate_expr(diag, stmt.state, env) if stmt.state is not None else params["state"][1]
    return True


def _check_slide(diag: Diagnostics, stmt: ast.DefineWindow, params: Params, spec: WindowSpec) -> None:
    """A sliding window's `slide` (1 event by default for `size`; required for `interval`) divides its length."""
    length = spec.size if spec.size is not None else spec.interval_ns
    if length is None:
        return  # already reported
    if spec.slide is None:
        if spec.size is not None and "slide" not in params:
            spec.slide = 1
            return
        if "slide" not in params:
            diag.error(
                f"sliding window '{stmt.name.value}' needs `slide` (how often it emits, in nanoseconds)",
                stmt.name.pos,
                "e.g. `with interval = nanos::from_seconds(60), slide = nanos::from_seconds(10) end`",
            )
        return
    if length % spec.slide != 0:
        unit = "events" if spec.size is not None else "nanoseconds"
        diag.error(
            f"`slide` ({spec.slide}) must divide the window's length ({length} {unit})",
            params["slide"][0].value.position or params["slide"][0].name.pos,
            "a sliding window is made of whole slides",
        )


def check_tilt_frames(diag: Diagnostics, frames: list[tuple[ast.ModPath, WindowSpec]]) -> None:
    """Tilt frames feed each window's output into the next (count and time windows may mix, as in
    Tremor). A sliding window's windows overlap, so it can only be the last frame of a chain."""
    for name, spec in frames if len(frames) > 1 else ():
        if spec.watermarked:
            diag.error(
                f"window '{spec.name}' ({'a session' if spec.kind == 'session' else 'with `lateness`'}) "
                "cannot be part of a tilt frame",
                name.pos,
                "windows closed by the watermark stand alone: `from in[w]`",
            )
    for (_, first), (name, second) in zip(frames, frames[1:], strict=False):
        if first.kind == "sliding":
            diag.error(
                f"window '{second.name}' cannot follow the sliding window '{first.name}' in a tilt frame",
                name.pos,
                "sliding windows overlap, so each event would be counted several times; put it last",
            )


def _positive_int(diag: Diagnostics, params: Params, key: str, least: int = 1) -> int | None:
    if key not in params:
        return None
    assign, value = params[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        if value is not None:
            at: Position = assign.value.position or assign.name.pos
            what = "a positive" if least > 0 else "a non-negative"
            diag.error(f"window `{key}` must be {what} integer, got {value!r}", at)
        return None
    return value


def _non_negative_int(diag: Diagnostics, params: Params, key: str) -> int | None:
    return _positive_int(diag, params, key, least=0)
