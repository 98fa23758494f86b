"""`relay hooks run`: fire one event from any host and print the merged result."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from relay.cli.options import cwd_option, settings_option

DIALECT_CHOICE = click.Choice(["relay", "claude", "gemini", "codex"])


class HostUsageError(click.UsageError):
    """A usage error of a command that hosts call as a hook."""

    exit_code = 1  # not 2: a host reads exit 2 as a deny of the tool call


class HostCommand(click.Command):
    """A command that hosts call as a hook: its usage errors exit 1, never 2."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            # format_message: with click's "Did you mean …?" for a mistyped option.
            raise HostUsageError(exc.format_message(), exc.ctx) from None


@click.command("run", cls=HostCommand)
@click.argument("event")
@settings_option
@cwd_option
@click.option(
    "--dialect",
    type=DIALECT_CHOICE,
    default="relay",
    show_default=True,
    help="Answer as relay (the merged result) or as a single hook of that host.",
)
@click.pass_context
def run(
    ctx: click.Context, event: str, settings_files: tuple[Path, ...], cwd: Path | None, dialect: str
) -> None:
    """Fire EVENT with the event object read from stdin; print the merged result as JSON.

    EVENT is a canonical name (BeforeTool) or a host's name (PreToolUse). A partial event
    is fine: the base fields are filled in. With --dialect claude, gemini or codex the
    answer is one hook's answer for that host, and an event name relay does not know
    passes through.
    """
    from relay.hosts.call import RunArgs, prepare
    from relay.server.client import Call

    # stdin may be a terminal (not read) or closed altogether (`<&-`): both are "no event".
    raw = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    args = RunArgs(
        event=event,
        dialect=dialect,
        settings=[str(path) for path in settings_files],
        cwd=str(cwd) if cwd is not None else None,
    )
    here = os.getcwd()
    reply = prepare(args, Call(argv=[], cwd=here, env=dict(os.environ), stdin=raw)).finish()
    sys.stdout.buffer.write(reply.stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(reply.stderr)
    sys.stderr.flush()
    reply.returned()
    ctx.exit(reply.exit_code)
