"""`contraflow script FILE.tremor [--state]`: run a script over JSON lines, as a user would try it.

Each input line is one event. Each event produces one output line on stdout:

- the emitted value, for the default port `out`;
- `{"$port": "<port>", "event": <value>}` for `emit ... => "<port>"`;
- `{"$dropped": true}` after `drop`;
- `{"$error": "<message at file:line:col>"}` for a runtime error, or
  `{"$error": "invalid JSON: ..."}` for an input line that is not JSON (both
  also reported on stderr with the input line number).

Without `--state` every event starts with `state` null; with it, state carries
from one event to the next and the final state is printed last as
`{"$state": <value>}`. Blank input lines are ignored, so output lines match
input events one to one. The exit status is 1 if any line failed.

`--arg NAME=VALUE` (repeatable; VALUE is JSON, or else taken as a string) sets
`args.NAME`, so a script written for `define script ... args` can be tried
alone. `use lib::x;` finds `lib/x.tremor` next to FILE or in $CONTRAFLOW_PATH.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import click
import orjson

from contraflow.errors import UserError
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
    where = f" at {err.position}" if err.position else ""
    return {"$error": f"{err.message}{where}"}


def run_lines(
    script: CompiledScript,
    lines: Iterable[str],
    *,
    keep_state: bool,
    errors: TextIO | None = None,
    args: dict[str, Any] | None = None,
) -> Iterator[Any]:
    """Run `script` over JSON `lines`; yields one output value per event (and `$state` at the end)."""
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
                errors.write(f"error: line {number}: {err}\n")
            yield format_error(err)
            continue
        if keep_state:
            state = result.state
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
    help="Set args.NAME (VALUE is JSON, or a plain string); repeatable.",
)
def script_command(file: Path, keep_state: bool, arg_values: tuple[str, ...]) -> None:
    """Run a tremor-script FILE over JSON lines on stdin; print one JSON result per event."""
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read {file}: {exc.strerror}") from None
    args = parse_args(arg_values)
    modules = file_resolver([file.resolve().parent, *search_path()])
    script = compile_script(parse_script(text, str(file)), name=file.stem, modules=modules)
    failed = False
    out = sys.stdout
    lines = run_lines(script, sys.stdin, keep_state=keep_state, errors=sys.stderr, args=args)
    for value in lines:
        if isinstance(value, dict) and "$error" in value:
            failed = True
        out.write(orjson.dumps(value).decode() + "\n")
        out.flush()
    if failed:
        raise SystemExit(1)


def parse_args(values: Iterable[str]) -> dict[str, Any]:
    """`--arg` values as the `args` record: `n=5` is 5, `tags=["a"]` an array, `name=web` a string."""
    args: dict[str, Any] = {}
    for item in values:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise UserError(f"--arg {item!r}: expected NAME=VALUE, e.g. --arg limit=10")
        try:
            args[name.strip()] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            args[name.strip()] = raw
    return args
