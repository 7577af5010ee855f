"""Who may talk to contraflow's listeners: tokens, and the refusal to listen in the open.

One shared token (`--token` or `$CONTRAFLOW_TOKEN`) guards the REST API (as an
HTTP Bearer token) and the SPU protocol (a handshake before any other request).
Every client reads the same variable, so a process started with it set (the
CLI, the runtime, Spark's Python workers) authenticates without more wiring.
A listener on a non-loopback address without a token refuses to start unless
`--insecure` says so. See docs/security.md.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from contraflow.errors import UserError

log = logging.getLogger("contraflow.security")

TOKEN_ENV = "CONTRAFLOW_TOKEN"
TLS_CA_ENV = "CONTRAFLOW_TLS_CA"

F = TypeVar("F", bound=Callable[..., Any])


def listener_options(guarded: str, served: str) -> Callable[[F], F]:
    """--token, --insecure, --tls-cert and --tls-key of a command that listens: the token
    guards `guarded`, TLS serves `served` ("the REST API", "the SPU")."""

    def decorate(command: F) -> F:
        options = [
            click.option(
                "--token",
                envvar=TOKEN_ENV,
                default=None,
                metavar="TOKEN",
                help=f"Require this token on {guarded} (or ${TOKEN_ENV}).",
            ),
            click.option(
                "--insecure", is_flag=True, help="Allow a non-loopback address without a token (warns)."
            ),
            click.option(
                "--tls-cert",
                type=click.Path(dir_okay=False, path_type=Path),
                help=f"Serve {served} over TLS: certificate (PEM).",
            ),
            click.option(
                "--tls-key",
                type=click.Path(dir_okay=False, path_type=Path),
                help=f"Serve {served} over TLS: private key (PEM).",
            ),
        ]
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def resolve_token(option: str | None) -> str | None:
    """The token given on the command line, else $CONTRAFLOW_TOKEN; None when neither is set.
    Setting it in this process's environment hands it to every client and child process."""
    token = option if option is not None else os.environ.get(TOKEN_ENV)
    if token is not None and not token:
        raise UserError("the token is empty: give --token a value (or unset CONTRAFLOW_TOKEN)")
    if token is not None:
        os.environ[TOKEN_ENV] = token
    return token


def client_token() -> str | None:
    """What clients send: $CONTRAFLOW_TOKEN, if set."""
    return os.environ.get(TOKEN_ENV) or None


def tokens_match(given: str | bytes | None, expected: str) -> bool:
    """Constant-time comparison (no timing hint about how much of a guess was right)."""
    if given is None:
        return False
    given_bytes = given.encode() if isinstance(given, str) else given
    return hmac.compare_digest(given_bytes, expected.encode())


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_exposure(host: str, address: str, what: str, token: str | None, insecure: bool) -> None:
    """Refuse to listen beyond loopback without a token (unless `insecure`, with a warning)."""
    if token is not None or is_loopback(host):
        return
    if not insecure:
        raise UserError(
            f"refusing to serve {what} on {address} without a token: anyone who reaches it could use it; "
            "set --token (or CONTRAFLOW_TOKEN), or pass --insecure"
        )
    log.warning(
        "serving %s on %s without a token (--insecure): anyone who reaches it can use it", what, address
    )


def server_tls(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """A server TLS context from `--tls-cert`/`--tls-key` (both or neither)."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise UserError("TLS needs both --tls-cert and --tls-key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as err:
        raise UserError(f"cannot use the TLS certificate {cert} / key {key}: {err}") from None
    return context


def use_tls_ca(path: str | None) -> None:
    """`--tls-ca FILE`: clients in this process (and its children) verify servers against it."""
    if path:
        if not Path(path).is_file():
            raise UserError(f"--tls-ca: no such file: {path}")
        os.environ[TLS_CA_ENV] = path


def client_tls() -> ssl.SSLContext | None:
    """What SPU clients connect with: TLS verified against $CONTRAFLOW_TLS_CA when it is set."""
    path = os.environ.get(TLS_CA_ENV)
    if not path:
        return None
    try:
        return ssl.create_default_context(cafile=path)
    except (OSError, ssl.SSLError) as err:
        raise UserError(f"cannot use the TLS CA file {path}: {err}") from None
