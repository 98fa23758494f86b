"""`relay mcp`: relay's tools for an agent, as an MCP server on stdio (spec/mcp.md)."""

from __future__ import annotations

from pathlib import Path

import click

from relay.cli.options import cwd_option, settings_option


@click.command("mcp")
@click.option(
    "--name",
    help="The calling agent's name (default: $RELAY_AGENT_NAME, which `relay run` sets).",
)
@cwd_option
@settings_option
def mcp(*, name: str | None, cwd: Path | None, settings_files: tuple[Path, ...]) -> None:
    """Serve relay's tools (messages, memory, your namespaces) over MCP on stdio.

    A host starts it: `relay install` registers it (claude, gemini, codex).
    """
    import os

    import anyio

    # Checked before relay opens anything: a file it opened would take a closed fd 0 or 1.
    for fd, stream in ((0, "stdin"), (1, "stdout")):
        try:
            os.fstat(fd)
        except OSError:
            raise click.ClickException(
                f"relay mcp serves MCP on stdin and stdout, and its {stream} is closed"
            ) from None

    from relay.engine.system import HookSystem
    from relay.mcp.channel import Channel
    from relay.mcp.server import build_server
    from relay.protocol.display import visible

    hooks = HookSystem(cwd=cwd, settings=settings_files)
    channel = Channel(hooks, name=name)
    server = build_server(channel)

    async def serve() -> None:
        await channel.start()
        await channel.sync_team_memory()
        for notice in channel.notices:  # stdout is the MCP stream: the user reads stderr
            click.echo(visible(f"relay: {notice}"), err=True)
        messenger = channel.messenger
        if not messenger.uses_nats:
            await server.run_stdio()
            return
        from relay.config.model import NatsConfig
        from relay.services.messaging.nats import NatsMessaging, inbox_prefix

        config = messenger.config.nats or NatsConfig()
        inbox = config.inboxPrefix or inbox_prefix(messenger.team, channel.name or "mcp")
        async with NatsMessaging(config, team=messenger.team, inbox=inbox) as nats:
            messenger.nats = nats
            await server.run_stdio()

    try:
        anyio.run(serve)
    finally:
        channel.close()
        hooks.close()
