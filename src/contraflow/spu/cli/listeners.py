"""The one check of a listen address the commands that start listeners share.

`spu run`, `sc run` and `contraflow run` each take HOST:PORT options for the
ports they open; each must parse, and beyond loopback each needs a token (or
`--insecure`) so that nobody on the network can write to the log unasked.
"""

from __future__ import annotations

from contraflow.errors import UserError
from contraflow.security import check_exposure
from contraflow.spu.protocol.address import parse_addr


def check_listener(addr: str, what: str, token: str | None, insecure: bool, option: str = "") -> None:
    """`addr` parses as HOST:PORT, and beyond loopback `what` listens with a token or under
    --insecure; a bad address is a user error naming `option` when given."""
    try:
        host, _ = parse_addr(addr)
    except ValueError as err:
        raise UserError(f"{option}: {err}" if option else str(err)) from None
    check_exposure(host, addr, what, token, insecure)
