"""Tremor's built-in Troy modules (`use tremor::connectors;`, `use tremor::pipelines;`).

Tremor 0.13 names them `troy::connectors` and `troy::pipelines`; both spellings are the same modules.

They are ordinary Troy source, compiled like any module, so they behave exactly
like user definitions (and can be inspected here).
"""

from __future__ import annotations

BUILTIN_MODULES: dict[tuple[str, ...], str] = {
    ("tremor", "connectors"): """\
# Line-delimited JSON on standard input/output.
define connector console from stdio
with
  codec = "json",
  preprocessors = ["separate"],
  postprocessors = ["separate"]
end;

# Tremor's line-separated text console (its older standard library's name): one string event per line.
define connector tty from stdio
with
  codec = "string",
  preprocessors = ["lines"],
  postprocessors = ["lines"]
end;

# Stops the runtime when an event arrives (its `delay` field, in ns, postpones the exit).
define connector exit from exit;

# The runtime's own metrics as events (Tremor's measurement shape).
define connector metrics from metrics;
""",
    ("tremor", "pipelines"): """\
# Forwards every event unchanged.
define pipeline passthrough
pipeline
  select event from in into out;
end;
""",
}

# Tremor 0.13's names for the same modules.
BUILTIN_MODULES[("troy", "connectors")] = BUILTIN_MODULES[("tremor", "connectors")]
BUILTIN_MODULES[("troy", "pipelines")] = BUILTIN_MODULES[("tremor", "pipelines")]
