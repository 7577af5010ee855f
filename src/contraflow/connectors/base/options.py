"""Reading a connector's `config` record into typed values, with errors that name alias and key.

`Connector.check_config` rejects unknown and missing keys, then calls the kind's
`read_config`, which reads its values through a `ConfigReader`, so a wrong type or range is reported the
same way everywhere: `connector 'out' (file): config key 'mode' must be one of
append, overwrite, read, truncate, write, got 'apend'`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from contraflow.errors import UserError


class ConnectorConfigError(UserError):
    """A connector's `config` is wrong; the message names the connector alias and the bad key."""


class ConfigReader:
    """Typed access to one connector's config; every problem is a `ConnectorConfigError`."""

    def __init__(self, alias: str, kind: str, config: Mapping[str, Any]) -> None:
        self.alias = alias
        self.kind = kind
        self.config = config

    def problem(self, problem: str) -> ConnectorConfigError:
        """An error naming this connector, for what no one key explains."""
        return ConnectorConfigError(f"connector '{self.alias}' ({self.kind}): {problem}")

    def error(self, key: str, problem: str) -> ConnectorConfigError:
        return self.problem(f"config key '{key}' {problem}")

    def missing(self, key: str) -> ConnectorConfigError:
        return self.problem(f"missing config key '{key}'")

    def _get(self, key: str, default: Any) -> Any:
        value = self.config.get(key, default)
        if value is _MISSING:
            raise self.missing(key)
        return value

    def string(self, key: str, default: Any = None) -> str:
        value = self._get(key, _MISSING if default is None else default)
        if not isinstance(value, str) or not value:
            raise self.error(key, f"must be a non-empty string, got {value!r}")
        return value

    def integer(self, key: str, default: int | None = None, *, minimum: int = 0) -> int:
        value = self._get(key, _MISSING if default is None else default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(key, f"must be an integer >= {minimum}, got {value!r}")
        return value

    def optional_integer(self, key: str, *, minimum: int = 0) -> int | None:
        return None if self.config.get(key) is None else self.integer(key, minimum=minimum)

    def number(self, key: str, default: float | None = None, *, minimum: float = 0.0) -> float:
        value = self._get(key, _MISSING if default is None else default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
            raise self.error(key, f"must be a number >= {minimum:g}, got {value!r}")
        return float(value)

    def optional_number(self, key: str, *, minimum: float = 0.0) -> float | None:
        return None if self.config.get(key) is None else self.number(key, minimum=minimum)

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def choice(self, key: str, choices: Collection[str], default: str | None = None) -> str:
        value = self._get(key, _MISSING if default is None else default)
        if not isinstance(value, str) or value.lower() not in choices:
            raise self.error(key, f"must be one of {', '.join(sorted(choices))}, got {value!r}")
        return value.lower()

    def record(self, key: str) -> dict[str, Any]:
        value = self._get(key, {})
        if not isinstance(value, dict):
            raise self.error(key, f"must be a record, got {value!r}")
        return value


_MISSING: Any = object()
