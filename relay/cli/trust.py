"""`relay trust`: review project hooks and allow (or stop allowing) them to run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from relay.cli.options import cwd_option

if TYPE_CHECKING:
    from relay.config.trust import HookFingerprint

CONTENT_FILES = 3
CONTENT_LINES = 40
FILES_SHOWN = 20
"""Fingerprinted files listed per hook without --all-files."""
INDENT = " " * 13
BROKEN = "BROKEN"
UNREADABLE = "CANNOT READ"


@click.command()
@click.option("--yes", "-y", is_flag=True, help="Trust without asking.")
@click.option("--revoke", is_flag=True, help="Forget every trusted hook of this project.")
@click.option(
    "--all-files",
    is_flag=True,
    help=f"List every fingerprinted file (default: the first {FILES_SHOWN} of each hook).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the review as JSON (each hook's state, files and changes); trusts only with --yes.",
)
@cwd_option
def trust(yes: bool, revoke: bool, all_files: bool, as_json: bool, cwd: Path | None) -> None:
    """List this project's hooks and the files each can reach, and record them as trusted.

    Project and project-local hooks run only once trusted; a changed hook, or a changed
    file it can reach, is untrusted again, and trusting it again shows what changed.
    """
    import msgspec

    from relay.config.model import TRUST_REQUIRED
    from relay.config.paths import NO_PROJECT
    from relay.config.review import changes
    from relay.config.trust import TrustGrant, TrustStore, assess, hook_key, hook_slot
    from relay.engine.interpreters import refusal_of, runs_by_path
    from relay.engine.system import HookSystem
    from relay.errors import RelayError
    from relay.protocol.display import visible

    def say(line: str) -> None:
        if not as_json:
            click.echo(line)

    system = HookSystem(cwd=cwd or Path.cwd(), telemetry=False)
    system.initialize()
    root = system.settings.root
    if root is None:
        raise RelayError(f"no project here: {NO_PROJECT.format(cwd or Path.cwd())}")
    store = TrustStore()
    if revoke:
        current = sum(1 for hook in system.registry.hooks if hook.needs_trust and hook.trusted)
        removed = store.revoke(root)
        older = max(0, removed - current)
        if as_json:
            click.echo(msgspec.json.encode({"root": str(root), "revoked": current, "older": older}))
            return
        more = f" (and {older} older record(s) of hooks since changed or removed)" if older else ""
        click.echo(f"revoked trust in {current} hook(s) of {root}{more}")
        return
    project_hooks = [hook for hook in system.registry.hooks if hook.needs_trust]
    report: list[dict[str, object]] = []
    pending: list[TrustGrant] = []
    refused: list[str] = []
    ranks: dict[tuple[str | None, str, str | None, str], int] = {}
    for hook in project_hooks:
        entry = hook.entry
        assert entry is not None  # project hooks come from settings files
        place = (hook.file, hook.event, hook.matcher.text, hook.name)
        ranks[place] = ranks.get(place, -1) + 1
        key = hook_key(hook.event, hook.matcher.text, entry, sequential=hook.sequential)
        assessed = assess(
            hook.event,
            hook.matcher.text,
            entry,
            root,
            known=store.known_files(root, key),
            keep_contents=True,
            sequential=hook.sequential,
        )
        # What it would run by path cannot be trusted: a file swapped in after the check
        # would run (DESIGN §7). With no project file in its reach, nothing can be.
        by_path = runs_by_path(entry, root, reached=list(assessed.files)) if assessed.files else []
        by_path += [(f"{item.place}: {item.what}", item.why) for item in assessed.by_path]
        if by_path and assessed.refusal is None:
            assessed = msgspec.structs.replace(assessed, digest=None, refusal=refusal_of(by_path))
        trusted = assessed.digest is not None and store.is_trusted(root, assessed.digest, key)
        state = "trusted" if trusted else "NOT TRUSTED" if assessed.digest else "CANNOT TRUST"
        reviewed: dict[str, object] = {
            "name": hook.name,
            "event": hook.event,
            "matcher": hook.matcher.text,
            "command": hook.command,
            "file": hook.file,
            "state": state.lower().replace(" ", "-"),
            "files": list(assessed.files),
            "whole_tree_through": list(assessed.tree),
            "refusal": assessed.refusal,
            "unpinned": [msgspec.to_builtins(item) for item in assessed.unpinned],
            "reach": list(entry.reach),
            "runs_by_path": [{"what": what, "why": why} for what, why in by_path],
            "changed": None,
        }
        report.append(reviewed)
        matcher = f" [{visible(hook.matcher.text, one_line=True)}]" if hook.matcher.text else ""
        colour = {"trusted": "green", "NOT TRUSTED": "yellow"}.get(state, "red")
        say(
            f"{click.style(f'{state:12}', fg=colour, bold=True)} {hook.event}{matcher}  {visible(hook.name, one_line=True)}"
        )
        say(f"{INDENT}command: {visible(hook.command, one_line=True)}   ({hook.file})")
        if assessed.refusal is not None:
            if by_path:
                say(
                    f"{INDENT}why: relay cannot run it as checked: it runs or loads project files by path"
                )
                say(f"{INDENT}(a file swapped in after the check would run):")
                for what, why in by_path:
                    say(f"{INDENT}  {visible(what, one_line=True)}: {visible(why, one_line=True)}")
            elif assessed.unpinned and not entry.reach:
                for line in _unpinned(assessed, hook.file, entry.reach):
                    say(f"{INDENT}{line}")
            else:
                say(f"{INDENT}why: {visible(assessed.refusal, one_line=True)}")
            refused.append(hook.name)
            continue
        if assessed.unpinned:
            for line in _unpinned(assessed, hook.file, entry.reach):
                say(f"{INDENT}{line}")
        for line in _fingerprinted(assessed, all_files):
            say(f"{INDENT}{line}")
        if trusted:
            continue
        slot = hook_slot(*place, ranks[place])
        previous = store.last_trust(root, slot, key)
        if previous is None:
            # Never trusted here: what it would run, to read before saying yes.
            for line in _contents(assessed, all_files):
                say(f"{INDENT}{line}")
        else:
            changed = changes(
                previous, hook.command, assessed, lambda sha: store.copy_of(root, sha)
            )
            if not changed:
                changed = ["its event, matcher, args, env or cwd"]
            reviewed["changed"] = {"since": previous.trusted_at, "lines": changed}
            say(f"{INDENT}changed since trusted at {previous.trusted_at}:")
            for line in changed:
                say(f"{INDENT}  {line}")
        pending.append(
            TrustGrant(
                assessed=assessed,
                description=f"{hook.event} {hook.name}",
                command=hook.command,
                slot=slot,
            )
        )
    # Broken entries and files: nothing to fingerprint, so nothing to trust (DESIGN §7).
    broken_names: list[str] = []
    for hook in system.registry.hooks:
        if hook.broken is None or not hook.from_project:
            continue
        broken_names.append(hook.name)
        matcher = f" [{visible(hook.matcher.text, one_line=True)}]" if hook.matcher.text else ""
        why = visible(str(hook.broken.errors[0]), one_line=True)
        say(
            f"{click.style(f'{BROKEN:12}', fg='red', bold=True)} {hook.event}{matcher}  "
            f"{visible(hook.name, one_line=True)}"
        )
        say(f"{INDENT}why: its settings entry cannot be read: {why}")
        report.append(
            {
                "name": hook.name,
                "event": hook.event,
                "matcher": hook.matcher.text,
                "command": hook.command,
                "file": hook.file,
                "state": "broken",
                "refusal": str(hook.broken.errors[0]),
            }
        )
    unreadable = [broken for broken in system.settings.broken if broken.scope in TRUST_REQUIRED]
    for broken in unreadable:
        say(f"{click.style(f'{UNREADABLE:12}', fg='red', bold=True)} {visible(broken.file)}")
        say(f"{INDENT}why: {visible(str(broken.error), one_line=True)}")
    if not project_hooks and not broken_names and not unreadable:
        say(f"no project hooks in {root}")
    granted = 0
    if pending and (yes or not as_json):
        if not yes:
            if not sys.stdin.isatty():
                raise RelayError("not trusting without confirmation: run `relay trust --yes`")
            if not click.confirm(f"Trust these {len(pending)} hook(s) to run on this machine?"):
                raise RelayError("nothing trusted")
        store.grant(root, pending)
        granted = len(pending)
        say(f"trusted {granted} hook(s)")
    elif project_hooks and not pending and not refused and not broken_names and not unreadable:
        say("all project hooks are trusted")
    if as_json:
        answer = {
            "root": str(root),
            "hooks": report,
            "trusted_now": granted,
            "unreadable": [{"file": item.file, "error": str(item.error)} for item in unreadable],
        }
        click.echo(msgspec.json.encode(answer, enc_hook=str))
    problems = []
    if refused:
        names = ", ".join(visible(name, one_line=True) for name in refused)
        problems.append(f"{len(refused)} hook(s) cannot be trusted (see why above): {names}")
    if broken_names:
        names = ", ".join(visible(name, one_line=True) for name in broken_names)
        problems.append(
            f"{len(broken_names)} hook(s) with a broken settings entry not trusted: {names}"
        )
    if unreadable:
        files = ", ".join(visible(item.file) for item in unreadable)
        problems.append(f"cannot trust the hooks of a settings file relay cannot read: {files}")
    if problems:
        if broken_names or unreadable:
            problems.append(
                "fix them (`relay hooks validate` says how), then run `relay trust` again"
            )
        raise RelayError("; ".join(problems))


def _fingerprinted(assessed: HookFingerprint, all_files: bool) -> list[str]:
    """Lines that list the files a hook's fingerprint covers, and why the whole tree."""
    from relay.protocol.display import visible

    lines: list[str] = []
    if assessed.tree:
        reasons = "; ".join(visible(reason, one_line=True) for reason in assessed.tree)
        lines.append(f"reaches the whole project (fingerprints every file) through: {reasons}")
    count = len(assessed.files)
    lines.append(f"fingerprints {count} file(s)" + (":" if count else ""))
    names = list(assessed.files) if all_files else list(assessed.files)[:FILES_SHOWN]
    for name in names:
        note = assessed.files[name].note
        lines.append(
            f"  {visible(name, one_line=True)}"
            + (f"  ({visible(note, one_line=True)})" if note else "")
        )
    if len(names) < count:
        lines.append(f"  … and {count - len(names)} more (--all-files lists them)")
    return lines


def _unpinned(assessed: HookFingerprint, file: str | None, pins: list[str]) -> list[str]:
    """Lines that say what a hook loads that relay cannot resolve, and how it is pinned:
    by the hook's `reach` field, or (not yet) how to name it there."""
    import msgspec

    from relay.protocol.display import visible

    lines = [
        "why: relay cannot pin what it loads:"
        if assessed.digest is None
        else "relay cannot pin what it loads:"
    ]
    lines.extend(f"  {visible(item.place)}: {visible(item.what)}" for item in assessed.unpinned)
    if assessed.digest is not None:
        named = ", ".join(visible(path) for path in pins)
        lines.append(f'pinned by its "reach" ({named}): every file under it is fingerprinted')
        return lines
    folders = sorted({item.folder for item in assessed.unpinned})
    example = ", ".join(msgspec.json.encode(folder).decode() for folder in folders)
    where = f" in {file}" if file else ""
    lines.append(
        f'to pin it: name the folders it loads code from in the hook\'s "reach" field{where},'
        f' for example "reach": [{visible(example)}]; relay fingerprints every file under them'
    )
    return lines


def _contents(assessed: HookFingerprint, all_files: bool) -> list[str]:
    """The text of the files a hook runs (the first CONTENT_FILES, at most CONTENT_LINES
    lines each, control characters made visible); binary files are named only."""
    from relay.protocol.display import visible

    if assessed.tree:
        return []  # the whole project: listed above, too much to show
    lines: list[str] = []
    names = [name for name in assessed.files if name in assessed.contents]
    shown = names if all_files else names[:CONTENT_FILES]
    for name in shown:
        text = assessed.contents[name].decode("utf-8", "replace").splitlines()
        lines.append(f"--- {visible(name, one_line=True)} ({len(text)} line(s)):")
        limit = len(text) if all_files else CONTENT_LINES
        lines.extend(f"  {visible(line, one_line=True)}" for line in text[:limit])
        if len(text) > limit:
            lines.append(f"  … {len(text) - limit} more line(s) (--all-files shows them all)")
    if len(shown) < len(names):
        lines.append(f"… and {len(names) - len(shown)} more file(s) (--all-files shows them)")
    return lines
