"""Tremor's built-in Troy modules (`use tremor::connectors;`, `use tremor::pipelines;`).

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

# Stops the runtime when an event arrives (its `delay` field, in ns, postpones the exit).
define connector exit from exit;
""",
    ("tremor", "pipelines"): """\
# Forwards every event unchanged.
define pipeline passthrough
pipeline
  select event from in into out;
end;
""",
}
