"""Parsing Tremor's `url` config values for socket connectors.

Tremor accepts `"host:port"` as well as a full URL (`"tcp://host:port"`,
`"http://host:port/path"`); the scheme only picks a default port.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from contraflow.connectors.base.options import ConfigReader

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    scheme: str
    path: str = "/"

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def endpoint(
    cfg: ConfigReader,
    key: str = "url",
    scheme: str = "tcp",
    *,
    default: str | None = None,
    port: int | None = None,
) -> Endpoint:
    """The host and port of `config[key]` (`default` when not set); a missing port is the kind's own
    `port`, else the scheme's, else an error."""
    raw = cfg.string(key, default)
    try:
        parsed = urlsplit(raw if "://" in raw else f"{scheme}://{raw}")
    except ValueError as err:  # e.g. an unbalanced [ of an IPv6 host
        raise cfg.error(key, f"is not a valid URL ({err}): {raw!r}") from None
    try:
        given = parsed.port
    except ValueError:
        raise cfg.error(key, f"has an invalid port: {raw!r}") from None
    if given is not None:
        port = given
    elif port is None:
        port = DEFAULT_PORTS.get(parsed.scheme)
    if not parsed.hostname or port is None:
        raise cfg.error(key, f"must be host:port or scheme://host:port, got {raw!r}")
    return Endpoint(parsed.hostname, port, parsed.scheme, parsed.path or "/")
