"""Tremor's `tls` config of the network connectors (tcp, ws, http), read into `ssl.SSLContext`s.

Servers (`tcp_server`, `ws_server`, `http_server`): `"tls": {"cert": PEM, "key": PEM}`,
as Tremor has it, plus contraflow's optional `"cafile"`: when set, clients must
present a certificate signed by that CA (mutual TLS; Tremor's servers never ask).

Clients (`tcp_client`, `ws_client`, `http_client`): `"tls": true` (the system's CAs,
the url's host as the name to verify), `false`, or a record with Tremor's keys
`cafile` (verify the server against this CA only), `domain` (the name to verify
and send as SNI, default the url's host), `cert` and `key` (a client certificate,
both or neither).

Files are loaded when the config is read, so a missing or invalid file is a
config error naming the key before anything starts.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contraflow.connectors.base.options import ConfigReader

TLS_KEY = "tls"
SERVER_KEYS = frozenset({"cert", "key", "cafile"})
CLIENT_KEYS = frozenset({"cafile", "domain", "cert", "key"})


@dataclass(frozen=True)
class ServerTls:
    """A server's TLS: the context to accept with, and the files it came from (uvicorn wants paths)."""

    context: ssl.SSLContext
    cert: str
    key: str
    cafile: str | None


@dataclass(frozen=True)
class ClientTls:
    """A client's TLS: the context to connect with and the name the server's certificate must carry."""

    context: ssl.SSLContext
    domain: str | None


def server_tls(cfg: ConfigReader) -> ServerTls | None:
    """The `tls` record of a server kind, or None without one."""
    spec = cfg.config.get(TLS_KEY)
    if spec is None:
        return None
    if not isinstance(spec, Mapping):
        raise cfg.error(TLS_KEY, f'must be a record {{"cert": ..., "key": ...}}, got {spec!r}')
    _check_keys(cfg, spec, SERVER_KEYS)
    if "cert" not in spec or "key" not in spec:
        raise cfg.error(TLS_KEY, "needs 'cert' and 'key' (PEM files)")
    cert, key = _path(cfg, spec, "cert"), _path(cfg, spec, "key")
    cafile = _path(cfg, spec, "cafile") if "cafile" in spec else None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _load(cfg, lambda: context.load_cert_chain(cert, key), f"cannot use cert {cert!r} with key {key!r}")
    if cafile is not None:
        _load(cfg, lambda: context.load_verify_locations(cafile), f"cannot use cafile {cafile!r}")
        context.verify_mode = ssl.CERT_REQUIRED
    return ServerTls(context, cert, key, cafile)


def client_tls(cfg: ConfigReader, host: str, *, default: bool = False) -> ClientTls | None:
    """The `tls` of a client kind: None for plain connections; `default` when the key is absent
    (true for `https://` and `wss://` urls)."""
    spec = cfg.config.get(TLS_KEY, default)
    if spec is False:
        return None
    if spec is True:
        return ClientTls(ssl.create_default_context(), host)
    if not isinstance(spec, Mapping):
        raise cfg.error(TLS_KEY, f'must be true, false or a record {{"cafile", "domain", ...}}, got {spec!r}')
    _check_keys(cfg, spec, CLIENT_KEYS)
    cafile = _path(cfg, spec, "cafile") if "cafile" in spec else None
    context = ssl.create_default_context() if cafile is None else _client_context_with_ca(cfg, cafile)
    if ("cert" in spec) != ("key" in spec):
        raise cfg.error(TLS_KEY, "needs both 'cert' and 'key' for a client certificate, or neither")
    if "cert" in spec:
        cert, key = _path(cfg, spec, "cert"), _path(cfg, spec, "key")
        _load(cfg, lambda: context.load_cert_chain(cert, key), f"cannot use cert {cert!r} with key {key!r}")
    domain = _path(cfg, spec, "domain") if "domain" in spec else host
    return ClientTls(context, domain)


def _client_context_with_ca(cfg: ConfigReader, cafile: str) -> ssl.SSLContext:
    """A client context that trusts `cafile` alone (Tremor: a configured CA replaces the system's);
    PROTOCOL_TLS_CLIENT verifies the certificate and the host name, as the default context does."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _load(cfg, lambda: context.load_verify_locations(cafile), f"cannot use cafile {cafile!r}")
    return context


def _check_keys(cfg: ConfigReader, spec: Mapping[str, Any], known: frozenset[str]) -> None:
    for name in spec:
        if name not in known:
            raise cfg.error(TLS_KEY, f"has an unknown key '{name}' (known: {', '.join(sorted(known))})")


def _path(cfg: ConfigReader, spec: Mapping[str, Any], name: str) -> str:
    """A string value of the `tls` record (a file path, or the domain)."""
    value = spec[name]
    if not isinstance(value, str) or not value:
        raise cfg.error(TLS_KEY, f"'{name}' must be a non-empty string, got {value!r}")
    return value


def _load(cfg: ConfigReader, load: Any, problem: str) -> None:
    try:
        load()
    except (OSError, ssl.SSLError, ValueError) as err:
        raise cfg.error(TLS_KEY, f"{problem}: {getattr(err, 'strerror', None) or err}") from None
