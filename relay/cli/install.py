"""`relay install`, `relay uninstall`, `relay doctor`: relay as the hook layer of a host."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from relay.cli.options import cwd_option
from relay.hosts import HOST_NAMES
from relay.protocol.display import visible

if TYPE_CHECKING:
    from relay.hosts.install import Change, Client, Target

host_argument = click.argument("host_name", metavar="HOST", type=click.Choice(HOST_NAMES))
scope_option = click.option(
    "--user/--project",
    "user",
    default=True,
    help="The host's per-user settings (default), or this project's.",
)


@click.command()
@host_argument
@scope_option
@click.option(
    "--events",
    "chosen",
    multiple=True,
    help="Install only these events (repeatable, or comma-separated; default: every event "
    "the installed host knows).",
)
@click.option(
    "--import",
    "import_hooks",
    is_flag=True,
    help="Move the host's existing hooks into relay's settings, so nothing runs twice.",
)
@click.option(
    "--trust/--no-trust",
    "trust",
    default=None,
    help="Codex: record Codex's trust in relay's entries (asked when not given).",
)
@click.option("--python-client", is_flag=True, help="Do not build the native client.")
@click.option(
    "--mcp/--no-mcp",
    "mcp",
    default=True,
    help="Also register relay's MCP server (`relay mcp`) in the host (default: yes).",
)
@click.option("--dry-run", is_flag=True, help="Say what would change; write nothing.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print what was done as JSON (file, entries added, kept and updated, client, notes).",
)
@cwd_option
def install(  # noqa: PLR0917 (click passes options positionally)
    host_name: str,
    user: bool,
    chosen: tuple[str, ...],
    import_hooks: bool,
    trust: bool | None,
    python_client: bool,
    mcp: bool,
    dry_run: bool,
    as_json: bool,
    cwd: Path | None,
) -> None:
    """Make relay the hook layer of HOST (claude, gemini or codex).

    Writes one entry per event into the host's settings (a minimal edit; running it again
    changes nothing), each running relay's client, which hands the event to relay's
    resident server (started on demand) and prints relay's merged answer.
    """
    from relay.errors import RelayError
    from relay.hosts import host
    from relay.hosts.install import (
        apply_edits,
        editable_checkout,
        ensure_client,
        host_events,
        install_lock,
        install_text,
        target,
    )
    from relay.hosts.mcp_config import install_edits

    lines: list[str] = []

    def say(line: str, *, err: bool = False) -> None:
        if as_json:
            lines.append(line.strip())
        else:
            click.echo(visible(line), err=err)

    chosen_host = host(host_name)
    start = cwd or Path.cwd()
    where = target(chosen_host, "user" if user else "project", start)
    known = host_events(chosen_host)
    events = known.events
    if chosen:
        wanted = [name.strip() for item in chosen for name in item.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in known.events]
        if unknown:
            raise RelayError(
                f"{chosen_host.title} does not know {', '.join(unknown)} "
                f"(it knows: {', '.join(known.events)})"
            )
        events = tuple(event for event in known.events if event in wanted)
    client = ensure_client(native=not python_client)
    file = where.file
    edits: list[Any] = [
        (file, lambda text: install_text(text, chosen_host, events, client, file=str(file)))
    ]
    if mcp:
        edits += install_edits(where)
    with install_lock(waiting=_say_waiting):
        if import_hooks:
            from relay.hosts.moving import import_host_hooks

            apply_edits(edits, where, dry_run=True)  # a refusal comes before anything moves
            for line in import_host_hooks(where, dry_run=dry_run):
                say(line)
        done = apply_edits(edits, where, dry_run=dry_run)
        change = done[0]
        verb = "would install" if dry_run else "installed"
        say(f"relay {verb} into {chosen_host.title} ({where.scope}): {file}")
        say(f"  events: {known.source}")
        parts = [f"{len(change.added)} added", f"{len(change.kept)} already there"]
        if change.updated:
            parts.append(f"{len(change.updated)} updated to this client")
        if change.repaired:
            parts.append(f"{len(change.repaired)} damaged, repaired ({', '.join(change.repaired)})")
        say(f"  entries: {', '.join(parts)}")
        say(f"  client: {client.argv[-1]} ({client.kind})")
        if client.note:
            say(f"  note: {client.note}")
        checkout = editable_checkout()
        if checkout is not None:
            say(
                f"  warning: this relay is an editable install of the checkout {checkout}: "
                "the host's entries run that checkout's code, and stop working when it is "
                "moved, deleted or on a broken branch; install relay for good (`pipx install "
                f"{checkout}`) and run `relay install {host_name}` from that relay",
                err=True,
            )
        if where.scope == "project" and where.root is not None:
            shared = [file, *(edit.file for edit in done[1:])]
            names = sorted(
                {str(path.relative_to(where.root)) for path in shared if path != where.local_file}
            )
            say(
                f"  warning: {', '.join(names)}"
                + (" are" if len(names) > 1 else " is")
                + " meant to be committed, but relay's entries there name this "
                f"machine's paths (the client {client.argv[-1]}"
                + (f", the MCP server's Python {sys.executable}" if mcp else "")
                + "): on a teammate's machine they do not run until the teammate runs "
                f"`relay install {host_name} --project` too (which rewrites those paths in "
                "the shared files). For relay in your own sessions only, the user scope "
                f"leaves the project's files alone: `relay uninstall {host_name} --project` "
                f"then `relay install {host_name}`",
                err=True,
            )
        if change.theirs:
            say(
                f"  your own entries that run relay on {', '.join(change.theirs)} are left as "
                "they are; relay's entry runs beside them (`relay doctor` says more)"
            )
        if change.foreign and not import_hooks:
            say(
                f"  {chosen_host.title} hooks of its own also run on {', '.join(change.foreign)}; "
                f"`relay install {host_name} --import` moves them into relay"
            )
        for edit in done[1:]:
            say(f"  mcp: {edit.what}: {_mcp_part(edit.file)} in {edit.file}")
        if chosen_host.name == "codex" and not dry_run:
            _codex_trust(where, start, trust, client, say=say)
    from relay.config.discovery import settings_problems

    # Installed all the same; but hooks of a broken file or entry will not run.
    for problem in settings_problems(start):
        say(f"  warning: relay's settings: {problem}", err=True)
    say("  check it: relay doctor")
    if as_json:
        report = {
            "host": chosen_host.name,
            "scope": where.scope,
            "file": str(file),
            "dry_run": dry_run,
            "added": list(change.added),
            "kept": list(change.kept),
            "updated": list(change.updated),
            "repaired": list(change.repaired),
            "client": {"path": client.argv[-1], "kind": client.kind},
            "foreign": list(change.foreign),
            "theirs": list(change.theirs),
            "lines": lines,
        }
        click.echo(json.dumps(report, default=str))


def _mcp_part(file: Path) -> str:
    """What of relay's MCP registration a file holds, for the user."""
    if file.name == "settings.local.json":
        return "the project's MCP server approved (enabledMcpjsonServers)"
    if file.name in ("settings.json",) and file.parent.name == ".claude":
        return "its tools allowed (permissions.allow mcp__relay)"
    return "the MCP server `relay` (relay mcp)"


@click.command()
@click.argument("host_name", metavar="[HOST]", required=False, type=click.Choice(HOST_NAMES))
@scope_option
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every host (user scope, and this project's), then stop relay's server and remove "
    "its client; lists what it will remove and asks first.",
)
@click.option(
    "--purge",
    is_flag=True,
    help="With --all: relay's state too (trust, hook log, messages, memories, the record of "
    "installs); your settings files stay.",
)
@click.option("--yes", is_flag=True, help="With --all: do not ask (needed off a terminal).")
@click.option("--dry-run", is_flag=True, help="Say what would change; write nothing.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print what was removed as JSON (file, events, notes)."
)
@cwd_option
def uninstall(  # noqa: PLR0917 (click passes options positionally)
    host_name: str | None,
    user: bool,
    every: bool,
    purge: bool,
    yes: bool,
    dry_run: bool,
    as_json: bool,
    cwd: Path | None,
) -> None:
    """Remove relay's entries from HOST's settings (and nothing else), or with --all from
    every host, and relay's server and client (with --purge, its state) too."""
    from relay.hosts import host
    from relay.hosts.install import install_lock, target

    lines: list[str] = []

    def say(line: str) -> None:
        if as_json:
            lines.append(line.strip())
        else:
            click.echo(visible(line))

    start = cwd or Path.cwd()
    if every:
        if host_name is not None:
            raise click.UsageError("name a HOST or give --all, not both")
        _uninstall_all(start, purge=purge, yes=yes, dry_run=dry_run, say=say)
        if as_json:
            click.echo(
                json.dumps({"all": True, "purge": purge, "dry_run": dry_run, "lines": lines})
            )
        return
    if host_name is None:
        raise click.UsageError("name a HOST (claude, gemini, codex), or give --all")
    if purge or yes:
        raise click.UsageError("--purge and --yes go with --all")
    chosen_host = host(host_name)
    where = target(chosen_host, "user" if user else "project", start)
    with install_lock(waiting=_say_waiting):
        change = _uninstall_host(where, start, dry_run=dry_run, say=say)
    if as_json:
        report = {
            "host": chosen_host.name,
            "scope": where.scope,
            "file": str(where.file),
            "dry_run": dry_run,
            "removed": list(change.removed),
            "lines": lines,
        }
        click.echo(json.dumps(report, default=str))


def _uninstall_host(
    where: Target, start: Path, *, dry_run: bool, say: Callable[[str], None]
) -> Change:
    """Take relay's entries (and its MCP server, Codex's trust in them, hooks moved by
    --import) out of one host file; the caller holds the install lock."""
    from relay.hosts import ledger
    from relay.hosts.install import apply_edits, uninstall_text
    from relay.hosts.mcp_config import uninstall_edits

    chosen_host = where.host
    file = where.file
    record = ledger.load(file)
    stale_keys: list[str] = []
    if chosen_host.name == "codex" and not dry_run:
        stale_keys = _codex_keys(where, start)
    if stale_keys:
        # First, so that the removal of relay's MCP table below finds the file holding
        # nothing else of relay's and removes it when relay created it.
        _codex_forget(stale_keys)
    edits: list[Any] = [
        (file, lambda text: uninstall_text(text, chosen_host, file=str(file), record=record)),
        *uninstall_edits(where),
    ]
    done = apply_edits(edits, where, dry_run=dry_run, undo=True)
    change: Change = done[0]
    verb = "would remove" if dry_run else "removed"
    for edit in done[1:]:
        if edit.changed:
            say(f"{verb} {_mcp_part(edit.file)} from {edit.file}")
    if not change.removed:
        say(f"relay is not installed in {file}")
    else:
        say(f"{verb} relay's entries for {len(change.removed)} event(s) from {file}")
        from relay.hosts.moving import restore_host_hooks

        for line in restore_host_hooks(where, dry_run=dry_run):
            say(f"  {line}")
    return change


def _installed_targets(start: Path) -> list[tuple[Target, list[Path]]]:
    """Every host and scope (the user's, this project's) where uninstall would change a
    file, with those files (a file it cannot read is listed: uninstall will say why)."""
    from relay.errors import RelayError
    from relay.hosts import host
    from relay.hosts.install import apply_edits, target, uninstall_text
    from relay.hosts.mcp_config import uninstall_edits

    found: list[tuple[Target, list[Path]]] = []
    seen: set[Path] = set()
    for name in HOST_NAMES:
        for scope in ("user", "project"):
            where = target(host(name), scope, start)
            if where.file in seen:
                continue  # a project at the home folder: its file is the user scope's
            seen.add(where.file)
            file, chosen = where.file, where.host
            edits: list[Any] = [
                (file, lambda text, f=file, h=chosen: uninstall_text(text, h, file=str(f))),
                *uninstall_edits(where),
            ]
            try:
                planned = apply_edits(edits, where, dry_run=True, undo=True)
            except RelayError:
                found.append((where, [file]))
                continue
            changed = [edit.file for edit in planned if edit.changed]
            if changed:
                found.append((where, list(dict.fromkeys(changed))))
    return found


def _uninstall_all(
    start: Path, *, purge: bool, yes: bool, dry_run: bool, say: Callable[[str], None]
) -> None:
    """`relay uninstall --all [--purge]`: list, ask, then remove every host's entries, stop
    the server, remove the client and relay's cache (and with --purge, relay's state)."""
    import shutil

    from relay.config.paths import cache_dir, state_dir
    from relay.errors import RelayError
    from relay.hosts.install import client_folder, install_lock
    from relay.server import client as server_client

    with install_lock(waiting=_say_waiting):
        targets = _installed_targets(start)
    socket = server_client.socket_path()
    status = server_client.control(socket, "status")
    server_pid = None
    if status is not None:
        try:
            server_pid = json.loads(status).get("pid")
        except (ValueError, AttributeError):
            server_pid = "?"
    clients = client_folder()
    state = state_dir()
    cache = cache_dir()
    # relay's own files only: RELAY_CACHE may name a folder that holds others'.
    cached = [
        path
        for path in (cache / "native", cache / "host-code.json", cache / "host-events.json")
        if path.exists()
    ]
    plan: list[str] = []
    for where, files in targets:
        plan.append(
            f"relay's entries in {where.host.title} ({where.scope}): "
            + ", ".join(str(path) for path in files)
        )
    if server_pid is not None:
        plan.append(f"relay's server (pid {server_pid}, stopped first): {socket}")
    if clients.exists():
        plan.append(f"relay's hook client: {clients}")
    if cached:
        plan.append(
            "relay's cache (built clients, what it read of hosts' code): "
            + ", ".join(str(path) for path in cached)
        )
    if purge and state.exists():
        plan.append(
            f"relay's state: {state} (trust, hook log, messages, memories, the record of installs)"
        )
    if not plan:
        say(
            "relay is not installed in any host, no server runs, and no client is left: "
            "nothing to remove"
        )
        return
    say("relay uninstall --all " + ("would remove" if dry_run else "will remove") + ":")
    for line in plan:
        say(f"  {line}")
    if not purge and state.exists():
        say(f"  (relay's state stays: {state}; --purge removes it too)")
    if dry_run:
        return
    if not yes:
        if not sys.stdin.isatty():
            raise RelayError(
                "not removing anything without asking: run it on a terminal, or add --yes"
            )
        if not click.confirm("Remove all of this?", default=False):
            say("nothing removed")
            return
    with install_lock(waiting=_say_waiting):
        for where, _ in targets:
            _uninstall_host(where, start, dry_run=False, say=say)
    if server_pid is not None:
        if _stop_server(socket, server_pid):
            say(f"stopped relay's server (pid {server_pid})")
        else:
            say(f"relay's server (pid {server_pid}) has not stopped within 10 s: kill it")
    if clients.exists():
        shutil.rmtree(clients)
        say(f"removed relay's hook client: {clients}")
    if cached:
        for path in cached:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            cache.rmdir()  # only when nothing else is in it
        say(f"removed relay's cache: {', '.join(str(path) for path in cached)}")
    if purge and state.exists():
        shutil.rmtree(state)
        say(f"removed relay's state: {state}")


def _stop_server(socket: str, pid: object) -> bool:
    """Ask the server to stop, and wait (up to 10 s) until it no longer answers and its
    process has ended; False if it has not."""
    import time

    from relay.server import client as server_client

    server_client.control(socket, "stop")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if server_client.control(socket, "status") is None and not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _alive(pid: object) -> bool:
    """Whether process `pid` still runs (one that has ended but is not yet reaped has not)."""
    import os

    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return True  # no /proc to tell a zombie by


def _codex_trust(
    where: Target,
    cwd: Path,
    trust: bool | None,
    client: Client,
    *,
    say: Callable[..., None] = click.echo,
) -> None:
    """Record Codex's trust in relay's entries of the target's file (exactly those, and
    only those whose command is this install's client), with the user's consent."""
    from relay.errors import RelayError
    from relay.hosts.codex_trust import (
        CodexError,
        codex_home,
        list_hooks,
        relay_hooks,
        trusted_text,
    )
    from relay.hosts.install import Change, read_text, update_file

    file = where.file
    executable = _codex_executable()
    if executable is None:
        say(
            "  codex not found on PATH: Codex skips hooks it does not trust; run "
            "`relay install codex --trust` once it is installed"
        )
        return
    try:
        before = read_text(file)
        hooks = list_hooks(executable, cwd)
        after = read_text(file)
    except CodexError as exc:
        say(f"  cannot ask Codex which hooks it trusts: {exc}", err=True)
        return
    if before != after:
        say(f"  {file} changed while Codex was asked; run `relay install codex` again", err=True)
        return
    ours = relay_hooks(
        hooks, file, after, where.host, lambda event: client.command(where.host, event)
    )
    pending = [hook for hook in ours if not hook.trusted]
    if not ours:
        say(f"  warning: Codex does not list relay's entries in {file}", err=True)
        return
    if not pending:
        say(f"  Codex trusts relay's {len(ours)} entries")
        return
    if trust is None and sys.stdin.isatty():
        trust = click.confirm(
            f"Codex runs only hooks it trusts. Record trust in relay's {len(pending)} "
            "entries (and only those)?",
            default=True,
        )
    if not trust:
        say(
            f"  NOT TRUSTED: Codex will skip relay's {len(pending)} entries until trusted: "
            "run `relay install codex --trust`"
        )
        return
    config = codex_home() / "config.toml"

    def record(text: str | None) -> Change:
        try:
            new = trusted_text(text or "", pending, file=str(config))
        except CodexError as exc:
            raise RelayError(str(exc)) from None
        return Change(file=config, text=new, changed=new != (text or ""), created_file=text is None)

    done = update_file(config, record)
    if done.created_file:  # so that uninstall, which takes the trust out, removes the file
        from relay.hosts import ledger
        from relay.hosts.ledger import FileRecord

        known = ledger.load(config) or FileRecord(file=str(config.absolute()))
        ledger.save(known.merged(created=True, containers=[], items=[]))
    say(f"  Codex trust recorded for {len(pending)} entries in {config}")


def _codex_keys(where: Target, cwd: Path) -> list[str]:
    """The trust keys of relay's entries in the target's file, to forget once removed."""
    from relay.hosts.codex_trust import CodexError, list_hooks, relay_hooks
    from relay.hosts.install import read_text

    executable = _codex_executable()
    if executable is None:
        return []
    try:
        hooks = list_hooks(executable, cwd)
    except CodexError:
        return []
    return [hook.key for hook in relay_hooks(hooks, where.file, read_text(where.file), where.host)]


def _codex_forget(keys: list[str]) -> None:
    from relay.hosts import ledger
    from relay.hosts.codex_trust import CodexError, codex_home, untrusted_text
    from relay.hosts.install import Change, update_file

    config = codex_home() / "config.toml"
    known = ledger.load(config)

    def forget(text: str | None) -> Change:
        new = untrusted_text(text, keys, file=str(config)) if text is not None else None
        if new is not None and not new.strip() and known is not None and known.created:
            new = None  # relay created the file, and nothing else is left in it
        return Change(file=config, text=new, changed=new != text)

    try:
        if update_file(config, forget).text is None:
            ledger.forget(config)
    except CodexError as exc:
        click.echo(visible(f"  left Codex's trust entries as they are: {exc}"), err=True)


def _codex_executable() -> str | None:
    import shutil

    return shutil.which("codex")


@click.command()
@click.option("--no-measure", is_flag=True, help="Skip timing an event through the client.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@cwd_option
def doctor(no_measure: bool, as_json: bool, cwd: Path | None) -> None:
    """Check relay as each host's hook layer: the client, the server, each host's settings
    (installed, current, trusted by Codex), relay's own settings and trust, and the cost of
    an event. Exits 1 when something would keep events from reaching relay."""
    import json

    from relay.hosts.doctor import diagnose

    findings = list(diagnose(cwd or Path.cwd(), measure=not no_measure))
    if as_json:
        click.echo(
            json.dumps(
                [{"level": f.level, "topic": f.topic, "text": f.text} for f in findings], indent=2
            )
        )
    else:
        marks = {
            "ok": click.style("ok  ", fg="green"),
            "warn": click.style("warn", fg="yellow", bold=True),
            "fail": click.style("FAIL", fg="red", bold=True),
        }
        for finding in findings:
            text = visible(f"{finding.topic:8}  {finding.text}")  # it quotes settings
            click.echo(f"{marks[finding.level]}  {text}")
    if any(finding.level == "fail" for finding in findings):
        raise SystemExit(1)


def _say_waiting(sentence: str) -> None:
    """Tell the user why install or uninstall does not go on yet (install_lock)."""
    click.echo(f"relay: {sentence}", err=True)
