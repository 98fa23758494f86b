"""`relay trust`: review project hooks and allow (or stop allowing) them to run."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from relay.cli.options import cwd_option


@click.command()
@click.option("--yes", "-y", is_flag=True, help="Trust without asking.")
@click.option("--revoke", is_flag=True, help="Forget every trusted hook of this project.")
@cwd_option
def trust(yes: bool, revoke: bool, cwd: Path | None) -> None:
    """List this project's hooks and record them as trusted.

    Project and project-local hooks run only once trusted; a changed hook or script is
    untrusted again.
    """
    from relay.config.trust import TrustStore
    from relay.engine.system import HookSystem
    from relay.errors import RelayError

    system = HookSystem(cwd=cwd or Path.cwd(), telemetry=False)
    system.initialize()
    root = system.settings.root
    if root is None:
        raise RelayError(f"no project here: no .relay/ or .git above {cwd or Path.cwd()}")
    store = TrustStore()
    if revoke:
        removed = store.revoke(root)
        click.echo(f"revoked trust in {removed} hook(s) of {root}")
        return
    project_hooks = [hook for hook in system.registry.hooks if hook.fingerprint is not None]
    if not project_hooks:
        click.echo(f"no project hooks in {root}")
        return
    for hook in project_hooks:
        state = "trusted" if hook.trusted else "NOT TRUSTED"
        matcher = f" [{hook.matcher.text}]" if hook.matcher.text else ""
        click.echo(f"{state:12} {hook.event}{matcher}  {hook.name}")
        click.echo(f"{'':12} command: {hook.command}   ({hook.file})")
    pending = [hook for hook in project_hooks if not hook.trusted]
    if not pending:
        click.echo("all project hooks are trusted")
        return
    if not yes:
        if not sys.stdin.isatty():
            raise RelayError("not trusting without confirmation: run `relay trust --yes`")
        if not click.confirm(f"Trust these {len(pending)} hook(s) to run on this machine?"):
            raise RelayError("nothing trusted")
    store.trust(
        root,
        [(hook.fingerprint, f"{hook.event} {hook.name}") for hook in pending if hook.fingerprint],
    )
    click.echo(f"trusted {len(pending)} hook(s)")
