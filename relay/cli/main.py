"""The `relay` command: a lazy group of command groups, and the error -> exit code mapping.

Subcommands are imported only when invoked, so `relay hooks run` pays for nothing else.
Exit codes: 0 success, 1 a RelayError (bad input, bad settings), 2 usage, 3 an unexpected
error (a bug), 130 interrupted.
"""

from __future__ import annotations

import os
import sys

import click

from relay.cli.lazy import LazyGroup
from relay.version import VERSION

COMMANDS: dict[str, tuple[str, str]] = {
    "hooks": ("relay.cli.hooks", "hooks"),
    "trust": ("relay.cli.trust", "trust"),
    "run": ("relay.cli.session", "run"),
    "sessions": ("relay.cli.session", "sessions_command"),
    "stop": ("relay.cli.session", "stop_command"),
    "memory": ("relay.cli.memory", "memory"),
    "send": ("relay.cli.messaging", "send"),
    "agents": ("relay.cli.messaging", "agents"),
    "inbox": ("relay.cli.messaging", "inbox"),
    "messages": ("relay.cli.messaging", "messages"),
    "watch": ("relay.cli.fleet_watch", "watch"),
    "dashboard": ("relay.cli.dashboard", "dashboard"),
    "serve": ("relay.cli.serve", "serve"),
    "install": ("relay.cli.install", "install"),
    "uninstall": ("relay.cli.install", "uninstall"),
    "doctor": ("relay.cli.install", "doctor"),
    "mcp": ("relay.cli.mcp", "mcp"),
    "up": ("relay.cli.fleet", "up_command"),
    "down": ("relay.cli.fleet", "down_command"),
    "restart": ("relay.cli.fleet", "restart_command"),
    "ps": ("relay.cli.fleet", "ps_command"),
    "attach": ("relay.cli.fleet", "attach_command"),
    "logs": ("relay.cli.fleet", "logs_command"),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
# The version from relay.version, not the installed metadata: reading that costs the
# floor of every command 10 ms (importlib.metadata, email, zipfile).
@click.version_option(VERSION, "-V", "--version", prog_name="relay")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """relay: a hook runtime for AI coding agents.

    Output is coloured on a terminal, never in a pipe or file, and never with NO_COLOR set.
    """
    if os.environ.get("NO_COLOR"):  # https://no-color.org: any non-empty value
        ctx.color = False


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL (bash, zsh or fish).

    \b
    bash: relay completion bash > ~/.local/share/bash-completion/completions/relay
    zsh:  relay completion zsh > "${fpath[1]}/_relay"   (or: eval "$(relay completion zsh)" in ~/.zshrc)
    fish: relay completion fish > ~/.config/fish/completions/relay.fish
    """
    from click.shell_completion import get_completion_class

    kind = get_completion_class(shell)
    assert kind is not None  # the choice allows only the shells click has
    click.echo(kind(cli, {}, "relay", "_RELAY_COMPLETE").source())


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and map errors to exit codes."""
    try:
        result = cli.main(args=argv, prog_name="relay", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        # click's own (a missing argument, a bad choice) in relay's format, as ours are.
        from relay.cli.options import UsageError

        # The original's code: `relay hooks run` exits 1, never 2, which a host reads as deny.
        code = exc.exit_code
        if not isinstance(exc, UsageError):
            exc = _as_relays(exc)
        exc.show()
        return code
    except click.ClickException as exc:
        _error(f"Error: {exc.format_message()}")
        return exc.exit_code
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo("relay: interrupted", err=True)
        return 130
    except BaseExceptionGroup as group:
        from relay.session.terminal import exit_request

        request = exit_request(group)  # e.g. SIGTERM's SystemExit raised inside a task
        if request is None:
            _error(f"relay: internal error: {group!r} (please report this)")
            return 3
        return request.code if isinstance(request.code, int) else 1
    except Exception as exc:
        _error(f"relay: internal error: {type(exc).__name__}: {exc} (please report this)")
        return 3
    return result if isinstance(result, int) else 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    run()


def _error(text: str) -> None:
    """An error on stderr; it may quote an argument, a setting or a stored text."""
    from relay.protocol.display import visible

    click.echo(visible(text), err=True)


def _as_relays(exc: click.UsageError) -> click.UsageError:
    from relay.cli.options import UsageError

    message = exc.format_message()
    if message.startswith("Invalid value for "):  # "Invalid value for 'HOST': …"
        where, _, rest = message.removeprefix("Invalid value for ").partition(": ")
        converted = UsageError(rest, hint=where.strip("'"))
    else:
        converted = UsageError(message)
    converted.ctx = exc.ctx
    return converted
