"""`contraflow script FILE.tremor [--state] [--show-drops] [--arg NAME=VALUE]...`: run a script over JSON lines, as a user would try it.

Each input line is one event. An event produces one output line on stdout:

- the emitted value, for the default port `out`;
- `{"$port": "<port>", "event": <value>}` for `emit ... => "<port>"`;
- nothing after `drop`, so the output pipes into any JSON-lines tool
  (`{"$dropped": true}` with `--show-drops`, to keep output lines aligned with
  input events);
- `{"$error": "<file:line:col: message, the source line, a caret>"}` for a runtime error, or
  `{"$error": "invalid JSON: ..."}` for an input line that is not JSON (both
  also reported on stderr with the input line number).

Without `--state` every event starts with `state` null; with it, state carries
from one event to the next and the final state is printed last as
`{"$state": <value>}`. Blank input lines are ignored. The exit status is 1 if
any line failed.

`--arg NAME=VALUE` (repeatable) sets `args.NAME`, so a script written for a
`define script ... args` can be tried on its own. VALUE is JSON (`--arg
rate=10`, `--arg tags='["a"]'`); anything that is not JSON is a string
(`--arg class=info`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import click
import orjson

from contraflow.errors import UserError
from contraflow.events import encode_value
from contraflow.lang.errors import ScriptRuntimeError
from contraflow.lang.script.compiler import CompiledScript, ScriptResult, compile_script
from contraflow.lang.script.modules import file_resolver, search_path
from contraflow.lang.script.parser import parse_script


def format_result(result: ScriptResult) -> Any:
    """The JSON value printed for one event's result (see the module docstring)."""
    if result.dropped:
        return {"$dropped": True}
    if result.port not in (None, "out"):
        return {"$port": result.port, "event": result.event}
    return result.event


def format_error(err: ScriptRuntimeError) -> Any:
    """`{"$error": ...}`: the message with the failing source line and a caret, as in `err` events."""
    return {"$error": err.render()}


def parse_arg(text: str) -> tuple[str, Any]:
    """`NAME=VALUE` from the command line: VALUE as JSON, or as a string when it is not JSON."""
    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise UserError(f"--arg {text!r}: expected NAME=VALUE, e.g. --arg error_rate=1000")
    try:
        return name.strip(), orjson.loads(raw)
    except orjson.JSONDecodeError:
        return name.strip(), raw


def run_lines(
    script: CompiledScript,
    lines: Iterable[str],
    *,
    keep_state: bool,
    errors: TextIO | None = None,
    args: dict[str, Any] | None = None,
    show_drops: bool = False,
) -> Iterator[Any]:
    """Run `script` over JSON `lines`; yields one output value per event (and `$state` at the end).

    A dropped event yields `{"$dropped": true}` only with `show_drops`."""
    state: Any = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if errors is not None:
                errors.write(f"error: line {number}: invalid JSON: {exc}\n")
            yield {"$error": f"invalid JSON: {exc}"}
            continue
        try:
            result = script.run(event, {}, state if keep_state else None, args)
        except ScriptRuntimeError as err:
            if errors is not None:
                errors.write(f"error: line {number}: {err.render()}\n")
            yield format_error(err)
            continue
        if keep_state:
            state = result.state
        if show_drops or not result.dropped:
            yield format_result(result)
    if keep_state:
        yield {"$state": state}


@click.command("script")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--state", "keep_state", is_flag=True, help="Carry `state` across events and print it at the end."
)
@click.option(
    "--arg",
    "arg_values",
    multiple=True,
    metavar="NAME=VALUE",
    help="Set args.NAME (VALUE is JSON, or else a string); repeatable.",
)
@click.option(
    "--show-drops",
    is_flag=True,
    help='Print {"$dropped": true} for a dropped event (default: print nothing).',
)
def script_command(file: Path, keep_state: bool, arg_values: tuple[str, ...], show_drops: bool) -> None:
    """Run a tremor-script FILE over JSON lines on stdin; print one JSON result per event."""
    args = dict(parse_arg(text) for text in arg_values)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read {file}: {exc.strerror}") from None
    modules = file_resolver([file.resolve().parent, *search_path()])  # `use lib::x;` next to FILE
    script = compile_script(parse_script(text, str(file)), name=file.stem, modules=modules)
    failed = False
    out = sys.stdout
    for value in run_lines(
        script, sys.stdin, keep_state=keep_state, errors=sys.stderr, args=args, show_drops=show_drops
    ):
        if isinstance(value, dict) and "$error" in value:
            failed = True
        out.write(encode_value(value).decode() + "\n")  # binaries as {"$bytes": base64}
        out.flush()
    if failed:
        raise SystemExit(1)
