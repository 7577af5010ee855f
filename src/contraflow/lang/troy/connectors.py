"""Checking and storing the `with` settings of a connector definition.

`codec`, `preprocessors`, `postprocessors`, `config`, `reconnect` and
`metrics_interval_s` each have a shape and (for plugins) a set of known names;
a wrong one is reported at the value, with a hint.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from contraflow.codecs import ConfigError, codec, postprocessors, preprocessors
from contraflow.lang.errors import Position
from contraflow.lang.graph import ConnectorSpec, PluginRef
from contraflow.lang.trickle import ast as tast
from contraflow.lang.trickle.diagnostics import Diagnostics, did_you_mean
from contraflow.lang.troy.kinds import CODECS, CONNECTOR_PARAMS, POSTPROCESSORS, PREPROCESSORS

# Builds a codec or one processor from its spec, raising ConfigError as the runtime would.
_BUILDERS: dict[str, Callable[[dict[str, Any]], object]] = {
    "codec": codec,
    "preprocessor": lambda spec: preprocessors([spec]),
    "postprocessor": lambda spec: postprocessors([spec]),
}


class ConnectorSettings:
    """Validating and storing one `with` key of a connector definition."""

    def __init__(self, diag: Diagnostics) -> None:
        self.diag = diag

    def apply(self, spec: ConnectorSpec, key: str, assign: tast.Assignment, value: Any) -> None:
        name = assign.name
        at = assign.value.position or name.pos  # problems with a value point at the value
        if key not in CONNECTOR_PARAMS:
            self.diag.error(
                f"unknown connector setting '{key}'", name.pos, did_you_mean(key, CONNECTOR_PARAMS)
            )
        elif key == "codec":
            spec.codec = self._plugin(value, CODECS, "codec", at)
        elif key in ("preprocessors", "postprocessors"):
            known = PREPROCESSORS if key == "preprocessors" else POSTPROCESSORS
            items = value if isinstance(value, list) else None
            if items is None:
                self.diag.error(f"`{key}` must be an array, got {_type(value)}", at)
                return
            refs = [self._plugin(item, known, key[:-1], at) for item in items]
            setattr(spec, key, [r for r in refs if r is not None])
        elif key == "config":
            if isinstance(value, dict):
                spec.config = value
            elif value is not None:
                self.diag.error(f"`config` must be a record, got {_type(value)}", at)
        elif key == "reconnect":
            self._reconnect(spec, value, at)
        elif key == "metrics_interval_s":
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                self.diag.error("`metrics_interval_s` must be a positive number of seconds", at)
            else:
                spec.metrics_interval_s = float(value)

    def _plugin(self, value: Any, known: frozenset[str], what: str, at: Position) -> PluginRef | None:
        """`"json"` or `{"name": "json", "config": {...}}`, with the name checked."""
        config: Any = {}
        if isinstance(value, dict):
            plugin_name, config = value.get("name"), value.get("config", {})
        else:
            plugin_name = value
        if not isinstance(plugin_name, str) or not isinstance(config, dict):
            self.diag.error(
                f"invalid {what}: {value!r}",
                at,
                f'write "{sorted(known)[0]}" or {{"name": "{sorted(known)[0]}", "config": {{...}}}}',
            )
            return None
        if plugin_name not in known:
            self.diag.unknown(what, plugin_name, at, known)
            return None
        try:
            _BUILDERS[what]({"name": plugin_name, "config": config})
        except ConfigError as err:  # a bad config key or value: what the runtime would refuse
            self.diag.error(str(err), at)
            return None
        return PluginRef(plugin_name, config)

    def _reconnect(self, spec: ConnectorSpec, value: Any, at: Position) -> None:
        if value == "none" or value is None:
            spec.reconnect = None
        elif isinstance(value, dict) and set(value) <= {"retry", "none"}:
            spec.reconnect = value
        else:
            self.diag.error(
                "invalid `reconnect`",
                at,
                '`"none"` or {"retry": {"interval_ms": 1000, "growth_rate": 2, "max_retries": 3}}',
            )


def check_connector_config(
    diag: Diagnostics, spec: ConnectorSpec, assign: tast.Assignment | None, definition: Position
) -> None:
    """The connector kind's own check of `config` (keys, types, values), reported at the culprit.

    The same check runs when the flow starts; here it points at the key or
    value in the Troy source. The first problem is reported (one error per mistake).
    """
    from contraflow.connectors.base import ConnectorConfigError, check_connector, connector_for
    from contraflow.errors import UserError

    cls: Any = None
    try:
        cls, config = connector_for(spec)  # imports a plugin's class: a missing one is reported here
        check_connector(cls, spec.alias, config)
    except ConnectorConfigError as err:
        message = str(err)
        key_match = _CONFIG_KEY.search(message)
        key = key_match.group(2) if key_match else None
        where = _config_position(assign, key, value=bool(key_match and key_match.group(1) is None))
        hint = ""
        if key is not None and "unknown config key" in message and cls is not None:
            hint = did_you_mean(key, sorted(cls.config_keys))
        elif "missing config key" in message:
            hint = _missing_hint(key, assign)
        diag.error(message, where or definition, hint)
    except UserError:
        return  # a reserved kind without an implementation here: nothing to check against


def _missing_hint(key: str | None, assign: tast.Assignment | None) -> str:
    if key is None:
        return ""
    return (
        f'add it: `with config = {{"{key}": ...}} end`'
        if assign is None
        else f'add `"{key}": ...` to `config`'
    )


# "unknown config key 'x'" / "missing config key 'x'" (group 1 set) or "config key 'x' must..." (a value)
_CONFIG_KEY = re.compile(r"(unknown |missing )?config key '([^']+)'")


def _config_position(assign: tast.Assignment | None, key: str | None, value: bool) -> Position | None:
    """Where `key` (or its value) is written in a literal `config = {...}`; else the config value."""
    if assign is None:
        return None
    fallback = assign.value.position or assign.name.pos
    record = getattr(assign.value, "ast", None)
    for field_key, field_value in getattr(record, "fields", ()):
        if key is not None and getattr(field_key, "value", None) == key:
            return field_value.pos if value else field_key.pos
    return fallback


def _type(value: Any) -> str:
    return {dict: "a record", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )
