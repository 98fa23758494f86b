"""`relay hooks run`: fire one event from any host and print the merged result."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from relay.cli.options import cwd_option, settings_option

DIALECT_CHOICE = click.Choice(["relay", "claude", "gemini"])


class HostUsageError(click.UsageError):
    """A usage error of a command that hosts call as a hook."""

    exit_code = 1  # not 2: a host reads exit 2 as a deny of the tool call


class HostCommand(click.Command):
    """A command that hosts call as a hook: its usage errors exit 1, never 2."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise HostUsageError(exc.message, exc.ctx) from None


@click.command("run", cls=HostCommand)
@click.argument("event")
@settings_option
@cwd_option
@click.option(
    "--dialect",
    type=DIALECT_CHOICE,
    default="relay",
    show_default=True,
    help="Answer as relay (merged result) or as a single Claude Code / Gemini CLI hook.",
)
@click.pass_context
def run(
    ctx: click.Context, event: str, settings_files: tuple[Path, ...], cwd: Path | None, dialect: str
) -> None:
    """Fire EVENT with the event object read from stdin; print the merged result as JSON.

    EVENT is a canonical name (BeforeTool) or a Claude Code name (PreToolUse). A partial
    event is fine: the base fields are filled in.
    """
    import msgspec

    from relay.engine.system import HookSystem
    from relay.errors import InputError
    from relay.protocol.codec import EventError, decode_event
    from relay.protocol.dialects import UnknownEventError
    from relay.protocol.render import render_for_host

    # stdin may be a terminal (not read) or closed altogether (`<&-`): both are "no event".
    raw = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    try:
        envelope = decode_event(event, raw, cwd=str(cwd.resolve()) if cwd else None)
    except UnknownEventError as exc:
        raise InputError(str(exc), source="EVENT") from None
    except EventError as exc:
        raise InputError(str(exc), path=exc.path) from None
    # The project is found from --cwd, else the event's cwd, else here (DESIGN §5).
    start = cwd or (Path(envelope.event.cwd) if os.path.isdir(envelope.event.cwd) else None)
    system = HookSystem(cwd=start, settings=settings_files, quiet=True)
    system.initialize()
    try:
        result = system.run(envelope.name, envelope)
    finally:
        system.close()
    answer = render_for_host(result, dialect)  # type: ignore[arg-type]
    if answer.exit_code == 0:
        # On a deny, a host shows stderr to the model: keep it to the reason alone.
        for warning in system.warnings():
            click.echo(f"relay: warning: {warning}", err=True)
    if answer.stdout is not None:
        sys.stdout.buffer.write(msgspec.json.encode(answer.stdout) + b"\n")
        sys.stdout.flush()
    if answer.stderr:
        click.echo(answer.stderr, err=True)
    ctx.exit(answer.exit_code)
