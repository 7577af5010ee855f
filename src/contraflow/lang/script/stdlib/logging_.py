"""`tremor::logging::` functions: log a message and return it as a log record, as Tremor 0.13 does.

`logging::info("{} items", 3)` formats positionally like `string::format`;
`logging::info("hi {name}", {"name": "x"})` fills named placeholders from a
record. The message goes to the `contraflow.script` logger at that level.
"""

from __future__ import annotations

import logging as _logging
import re
from typing import Any

from contraflow.lang.script.stdlib import tremor_fn
from contraflow.lang.script.stdlib._check import want
from contraflow.lang.script.stdlib.string_ import format_
from contraflow.lang.script.values import fail, to_text

_LOG = _logging.getLogger("contraflow.script")
_NAMED = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _message(fn: str, args: tuple[Any, ...]) -> str:
    if not args:
        fail(f"{fn} needs a format string")
    text = want(args[0], str, fn, "format")
    if len(args) == 2 and type(args[1]) is dict:
        fields = args[1]

        def field(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in fields:
                fail(f"{fn}: no value for `{{{name}}}`")
            return to_text(fields[name])

        return _NAMED.sub(field, text)
    return format_(text, *args[1:])


def _register(level: str, python_level: int) -> None:
    fn = f"logging::{level.lower()}"

    def log(*args: Any) -> dict[str, Any]:
        message = _message(fn, args)
        _LOG.log(python_level, message)
        return {"level": level, "args": message, "origin": "Tremor", "path": "tremor_pipeline::logging"}

    log.__doc__ = f"`{fn}(format, ...)`: log at {level} and return the log record."
    tremor_fn(fn)(log)


for _level, _python in (
    ("TRACE", 5),
    ("DEBUG", _logging.DEBUG),
    ("INFO", _logging.INFO),
    ("WARN", _logging.WARNING),
    ("ERROR", _logging.ERROR),
):
    _register(_level, _python)
