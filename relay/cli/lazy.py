"""A click group whose subcommands are imported on first use, and relay's error mapping."""

from __future__ import annotations

import importlib
from typing import Any

import click


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with the first sentence of its help, whole (wrapped, never cut
        off with `...` as click does to fit one line)."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """click's, with the closest command named when there is no such command (click
        offers none for commands that are imported on use)."""
        name = args[0]
        if (
            not ctx.resilient_parsing
            and not name.startswith("-")
            and self.get_command(ctx, name) is None
        ):
            close = closest_name(name, self.list_commands(ctx))
            hint = f" Did you mean {close!r}?" if close else ""
            raise click.UsageError(f"No such command {name!r}.{hint}", ctx)
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module_name, attribute = self.lazy[cmd_name]
            command = getattr(importlib.import_module(module_name), attribute)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        from relay.errors import RelayError
        from relay.protocol.display import visible

        try:
            return super().invoke(ctx)
        except RelayError as exc:
            # Expected failures (bad input, bad settings): a clear message, no traceback.
            # Its message may quote a project's settings or a stored text: made visible.
            click.echo(
                f"{click.style('relay: error:', fg='red', bold=True)} {visible(str(exc))}", err=True
            )
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("relay: interrupted", err=True)
            ctx.exit(130)


def closest_name(name: str, known: list[str]) -> str | None:
    """The known name a mistyped one is closest to (two letters swapped, a letter more or
    less, another case), if any is close enough."""
    import difflib

    by_lower = {candidate.lower(): candidate for candidate in known}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None
