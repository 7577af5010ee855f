"""The `contraflow` command.

Subcommands live next to the code they drive and are imported only when
invoked, so `contraflow topic list` does not pay for importing PySpark.
Register a subcommand by adding it to `COMMANDS` as "module:attribute".
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from contraflow import __version__
from contraflow.errors import UserError

COMMANDS: dict[str, str] = {
    "check": "contraflow.lang.commands:check",
    "script": "contraflow.lang.script.commands:script_command",
    "topic": "contraflow.spu.cli.commands:topic",
    "produce": "contraflow.spu.cli.commands:produce",
    "consume": "contraflow.spu.cli.commands:consume",
    "spu": "contraflow.spu.cli.server_commands:spu",
    "sc": "contraflow.spu.cli.cluster_commands:sc",
    "cluster": "contraflow.spu.cli.cluster_commands:cluster",
    "run": "contraflow.run_command:run",
    "query": "contraflow.pipeline.commands:query",
    "state": "contraflow.pipeline.commands:state",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args: Any, lazy: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module_name, attr = self._lazy[cmd_name].split(":")
            command = getattr(importlib.import_module(module_name), attr)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="contraflow")
def cli() -> None:
    """contraflow: event flows written in Troy and Trickle, run on Spark over a durable log."""


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one line on stderr and a non-zero exit."""
    try:
        cli.main(args=argv, prog_name="contraflow", standalone_mode=False)
    except UserError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":
    main()
