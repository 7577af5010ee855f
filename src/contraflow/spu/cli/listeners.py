"""The one check of a listen address, and the options, the commands that start listeners share.

`spu run`, `sc run` and `contraflow run` each take HOST:PORT options for the
ports they open; each must parse, and beyond loopback each needs a token (or
`--insecure`) so that nobody on the network can write to the log unasked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from contraflow.errors import UserError
from contraflow.security import check_exposure
from contraflow.spu.protocol.address import parse_addr

F = TypeVar("F", bound=Callable[..., object])


def check_listener(addr: str, what: str, token: str | None, insecure: bool, option: str = "") -> None:
    """`addr` parses as HOST:PORT, and beyond loopback `what` listens with a token or under
    --insecure; a bad address is a user error naming `option` when given."""
    try:
        host, _ = parse_addr(addr)
    except ValueError as err:
        raise UserError(f"{option}: {err}" if option else str(err)) from None
    check_exposure(host, addr, what, token, insecure)


def door_options(kafka_served_by: str) -> Callable[[F], F]:
    """--kafka-addr and --registry-addr: the other protocols a command also serves, the Kafka
    protocol by `kafka_served_by` (the SPU it starts)."""

    def decorate(command: F) -> F:
        options = [
            click.option(
                "--kafka-addr",
                default=None,
                metavar="HOST:PORT",
                help=f"{kafka_served_by} also serves the Kafka protocol here (e.g. 127.0.0.1:9092; "
                "docs/kafka.md).",
            ),
            click.option(
                "--registry-addr",
                default=None,
                metavar="HOST:PORT",
                help="Also serve the schema registry's REST API here (e.g. 127.0.0.1:8081; docs/registry.md).",
            ),
        ]
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
