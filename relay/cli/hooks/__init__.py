"""`relay hooks …`: run, test and inspect hooks. One module per subcommand, imported on use."""

from __future__ import annotations

import click

from relay.cli.lazy import LazyGroup

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("relay.cli.hooks.run", "run"),
    "test": ("relay.cli.hooks.test", "test"),
    "new": ("relay.cli.hooks.new", "new"),
    "list": ("relay.cli.hooks.listing", "list_hooks"),
    "validate": ("relay.cli.hooks.validate", "validate"),
    "enable": ("relay.cli.hooks.toggle", "enable"),
    "disable": ("relay.cli.hooks.toggle", "disable"),
    "schema": ("relay.cli.hooks.schema", "schema"),
    "log": ("relay.cli.hooks.log", "log"),
    "replay": ("relay.cli.hooks.log", "replay"),
    "import": ("relay.cli.hooks.importing", "import_hooks"),
    "wait-mail": ("relay.cli.hooks.waitmail", "wait_mail"),
}


@click.group(cls=LazyGroup, lazy=SUBCOMMANDS)
def hooks() -> None:
    """Run, test and inspect hooks."""
