"""Tremor's `tls` config of the network connectors (tcp, ws, http), read into `ssl.SSLContext`s.

Servers (`tcp_server`, `ws_server`, `http_server`): `"tls": {"cert": PEM, "key": PEM}`,
as Tremor has it, plus contraflow's optional `"cafile"`: when set, clients must
present a certificate signed by that CA (mutual TLS; Tremor's servers never ask).

Clients (`tcp_client`, `ws_client`, `http_client`): `"tls": true` (the system's CAs,
the url's host as the name to verify), `false`, or a record with Tremor's keys
`cafile` (verify the server against this CA only), `domain` (the name to verify
and send as SNI, default the url's host), `cert` and `key` (a client certificate,
both or neither).

Checking a flow (`read_config`) checks the record's shape only: the files are
read when a connector is created (`context()`), so `contraflow check` works where
the certificates are not (Tremor's tests make theirs before they run), and a
missing or invalid file fails the deploy with a config error naming `tls`.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contraflow.connectors.base.options import ConfigReader

TLS_KEY = "tls"
SERVER_KEYS = frozenset({"cert", "key", "cafile"})
CLIENT_KEYS = frozenset({"cafile", "domain", "cert", "key"})


@dataclass(frozen=True)
class ServerTls:
    """A server's TLS files (uvicorn wants the paths); `context()` loads them."""

    cfg: ConfigReader = field(repr=False, compare=False)
    cert: str
    key: str
    cafile: str | None
    _loaded: dict[str, ssl.SSLContext] = field(default_factory=dict, repr=False, compare=False)

    def context(self) -> ssl.SSLContext:
        """The context to accept with (loaded once); a config error naming `tls` if a file is bad."""
        if not self._loaded:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            _load_chain(self.cfg, context, self.cert, self.key)
            if self.cafile is not None:
                _load(
                    self.cfg,
                    lambda: context.load_verify_locations(self.cafile),
                    f"cannot use cafile {self.cafile!r}",
                )
                context.verify_mode = ssl.CERT_REQUIRED
            self._loaded["context"] = context
        return self._loaded["context"]


@dataclass(frozen=True)
class ClientTls:
    """A client's TLS: whom to trust, the name the server's certificate must carry, its own certificate."""

    cfg: ConfigReader = field(repr=False, compare=False)
    domain: str
    cafile: str | None = None
    cert: str | None = None
    key: str | None = None
    _loaded: dict[str, ssl.SSLContext] = field(default_factory=dict, repr=False, compare=False)

    def context(self) -> ssl.SSLContext:
        """The context to connect with (loaded once); a config error naming `tls` if a file is bad."""
        if not self._loaded:
            context = ssl.create_default_context() if self.cafile is None else self._trusting(self.cafile)
            if self.cert is not None and self.key is not None:
                _load_chain(self.cfg, context, self.cert, self.key)
            self._loaded["context"] = context
        return self._loaded["context"]

    def _trusting(self, cafile: str) -> ssl.SSLContext:
        """Trusts `cafile` alone (Tremor: a configured CA replaces the system's); PROTOCOL_TLS_CLIENT
        verifies the certificate and the host name, as the default context does."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        _load(self.cfg, lambda: context.load_verify_locations(cafile), f"cannot use cafile {cafile!r}")
        return context


def loaded_tls(options: Any) -> ssl.SSLContext | None:
    """The context of a kind's `options.tls` (None without TLS), its files read now: called when a
    connector is created, so a bad file fails the deploy."""
    tls = getattr(options, "tls", None)
    return tls.context() if isinstance(tls, ServerTls | ClientTls) else None


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
    cafile = _string(cfg, spec, "cafile") if "cafile" in spec else None
    return ServerTls(cfg, _string(cfg, spec, "cert"), _string(cfg, spec, "key"), cafile)


def client_tls(cfg: ConfigReader, host: str, *, default: bool = False) -> ClientTls | None:
    """The `tls` of a client kind: None for plain connections; `default` when the key is absent
    (true for `https://` and `wss://` urls)."""
    spec = cfg.config.get(TLS_KEY, default)
    if spec is False:
        return None
    if spec is True:
        return ClientTls(cfg, host)
    if not isinstance(spec, Mapping):
        raise cfg.error(TLS_KEY, f'must be true, false or a record {{"cafile", "domain", ...}}, got {spec!r}')
    _check_keys(cfg, spec, CLIENT_KEYS)
    if ("cert" in spec) != ("key" in spec):
        raise cfg.error(TLS_KEY, "needs both 'cert' and 'key' for a client certificate, or neither")
    value = {name: _string(cfg, spec, name) for name in CLIENT_KEYS if name in spec}.get
    return ClientTls(cfg, value("domain") or host, value("cafile"), value("cert"), value("key"))


def _check_keys(cfg: ConfigReader, spec: Mapping[str, Any], known: frozenset[str]) -> None:
    for name in spec:
        if name not in known:
            raise cfg.error(TLS_KEY, f"has an unknown key '{name}' (known: {', '.join(sorted(known))})")


def _string(cfg: ConfigReader, spec: Mapping[str, Any], name: str) -> str:
    """A string value of the `tls` record (a file path, or the domain)."""
    value = spec[name]
    if not isinstance(value, str) or not value:
        raise cfg.error(TLS_KEY, f"'{name}' must be a non-empty string, got {value!r}")
    return value


def _load_chain(cfg: ConfigReader, context: ssl.SSLContext, cert: str, key: str) -> None:
    _load(cfg, lambda: context.load_cert_chain(cert, key), f"cannot use cert {cert!r} with key {key!r}")


def _load(cfg: ConfigReader, load: Callable[[], Any], problem: str) -> None:
    try:
        load()
    except (OSError, ssl.SSLError, ValueError) as err:
        raise cfg.error(TLS_KEY, f"{problem}: {getattr(err, 'strerror', None) or err}") from None
