"""`relay doctor`: is relay working as each host's hook layer, and what does an event cost?

Each check is a `Finding`: ok, warn (works, but not as well as it could) or fail (a host
event would not reach relay, or reach it broken). Nothing here changes anything (what it
reads out of a host's code is cached in relay's state folder, relay.hosts.claude).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

import msgspec

from relay.config import sockets
from relay.config.paths import find_project_root
from relay.hosts import HOST_NAMES, host
from relay.hosts.install import (
    Client,
    Target,
    client_folder,
    current_client,
    damaged_entries,
    host_events,
    installed_events,
    read_text,
    target,
    their_relay_entries,
)
from relay.hosts.model import Host
from relay.server import client as server_client

Level = Literal["ok", "warn", "fail"]
PROBE_EVENT = "RelayDoctorProbe"
"""An event no hook is registered for: the claude dialect passes it through untouched."""
PROBE_RUNS = 7


class Finding(msgspec.Struct, frozen=True):
    """One check's result."""

    level: Level
    topic: str
    text: str


def diagnose(
    cwd: Path, env: Mapping[str, str] | None = None, *, measure: bool = True
) -> Iterator[Finding]:
    """Every check, in the order a user would fix things."""
    env = os.environ if env is None else env
    yield from _relay_checks(env)
    yield _copier_check(env)
    installed_client = current_client(env)
    yield from _server_checks(env)
    for name in HOST_NAMES:
        yield from _host_checks(name, cwd, env, installed_client)
    yield from _project_checks(cwd, env)
    yield _memory_model_check()
    if measure and installed_client is not None:
        yield from _cost(installed_client, cwd, env)


def _relay_checks(env: Mapping[str, str]) -> Iterator[Finding]:
    found = shutil.which("relay", path=env.get("PATH"))
    here = Path(sys.executable).parent / "relay"
    if found is None:
        yield Finding(
            "warn",
            "relay",
            f"`relay` is not on PATH (this install: {here}); the hosts do not need it "
            "(their entries run relay's client by its full path), but you may",
        )
    elif Path(found).resolve() != here.resolve():
        yield Finding("warn", "relay", f"`relay` on PATH is {found}, not this install ({here})")
    else:
        yield Finding("ok", "relay", f"{sockets.version()} at {here}")


def _copier_check(env: Mapping[str, str]) -> Finding:
    """Which output copier `relay run` uses (spec/session.md): the native one, built when
    the package was installed, or the Python one, with less throughput."""
    from relay.session import copier

    native, why_not = copier.native_copier_status()
    if native is None:
        return Finding(
            "warn",
            "copier",
            f"no native output copier: {why_not}; `relay run` copies with Python, more slowly",
        )
    if env.get("RELAY_COPIER") == "python":
        return Finding("ok", "copier", "RELAY_COPIER=python: `relay run` copies with Python")
    return Finding("ok", "copier", f"`relay run` copies output with {native}")


def _memory_model_check() -> Finding:
    """Which model memory search by meaning uses (spec/memory.md): MiniLM (the `meaning`
    extra), wordllama (the `semantic` extra) as the fallback, or none (by words only)."""
    from relay.services.memory.semantic import model_report

    best, text = model_report()
    return Finding("ok" if best else "warn", "memory", text)


def _server_checks(env: Mapping[str, str]) -> Iterator[Finding]:
    path = server_client.socket_path(env)
    squatted = _socket_folder_check(os.path.dirname(path))
    if squatted is not None:
        yield squatted
        return
    answer = server_client.control(path, "status")
    if answer is None:
        yield Finding("ok", "server", f"not running (the first event starts it): {path}")
        return
    try:
        status = json.loads(answer)
    except ValueError:
        yield Finding("fail", "server", f"answers at {path} but not with its status")
        return
    if status.get("install") != sockets.identity():
        yield Finding("warn", "server", f"a server of another install answers at {path}")
        return
    yield Finding(
        "ok",
        "server",
        f"running, pid {status.get('pid')}, {status.get('calls', 0)} call(s) answered: {path}",
    )


def _socket_folder_check(folder: str) -> Finding | None:
    """A failure when the server's socket folder exists but is not this user's alone (mode
    0700): another user may have made it first (in /tmp anyone can), and then neither
    client nor server will use it, so every event runs in-process (slower)."""
    try:
        status = os.lstat(folder)
    except FileNotFoundError:
        return None  # made, private, when the first event starts the server
    except OSError as exc:
        return Finding("fail", "server", f"cannot look at the socket folder {folder}: {exc}")
    import stat

    fix = f"remove it (as its owner or root: rm -r {folder}) or set RELAY_HOME elsewhere"
    if not stat.S_ISDIR(status.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(status.st_mode) else "not a directory"
        problem = f"is {what}"
    elif status.st_uid != os.getuid():
        problem = f"belongs to {_user_name(status.st_uid)}, not you: another user took it"
    elif status.st_mode & 0o077:
        problem = f"is mode {stat.S_IMODE(status.st_mode):04o}, open to other users"
        fix = f"chmod 700 {folder}"
    else:
        return None
    return Finding(
        "fail",
        "server",
        f"the socket folder {folder} {problem}; relay will not use it, so every event runs "
        f"in-process, without the server; {fix}",
    )


def _user_name(uid: int) -> str:
    import pwd

    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _host_checks(
    name: str, cwd: Path, env: Mapping[str, str], client: Client | None
) -> Iterator[Finding]:
    chosen = host(name)
    known = None
    found = False  # relay's entries, sound or damaged, in either file
    for scope in ("user", "project"):
        where = target(chosen, scope, cwd, env)
        try:
            text = read_text(where.file)
        except Exception as exc:  # an unreadable file is a finding, not a crash
            yield Finding("fail", chosen.name, f"{where.file}: {exc}")
            continue
        label = f"{chosen.title} ({scope}, {where.file})"
        again = f"`relay install {name}{' --project' if scope == 'project' else ''}`"
        damaged = damaged_entries(text, chosen, client_folder(env))
        for event, commands in damaged.items():
            yield Finding(
                "fail",
                chosen.name,
                f"{label}: relay's entry for {event} is damaged ({commands[0]}: its last words "
                f"are not `--dialect {chosen.name} {event}`), so {event} does not reach relay "
                f"as it should (the client refuses it, and a refusal is exit 2: a block); "
                f"{again} repairs it in place",
            )
        for event, all_commands in their_relay_entries(text, chosen).items():
            commands = [item for item in all_commands if item not in damaged.get(event, [])]
            if not commands:
                continue
            yield Finding(
                "warn",
                chosen.name,
                f"{label}: {event} has an entry of yours that runs relay ({commands[0]}); relay "
                "leaves it as it is (install adds its own beside it, and the events run "
                f"relay twice): if it is meant to be relay's, remove it and run {again}",
            )
        entries = installed_events(text, chosen)
        found = found or bool(damaged)
        if not entries:
            continue
        if known is None:
            known = host_events(chosen, env)
        missing = [event for event in known.events if event not in entries and event not in damaged]
        stale = sorted(
            event
            for event, commands in entries.items()
            if client is None or client.command(chosen, event) not in commands
        )
        doubled = sorted(event for event, commands in entries.items() if len(commands) > 1)
        if stale:
            yield Finding(
                "fail" if client is None else "warn",
                chosen.name,
                f"{label}: {len(stale)} entr(ies) run another relay client than this install's, "
                "or in an older form; "
                f"run `relay install {name}{' --project' if scope == 'project' else ''}` again",
            )
        if doubled:
            yield Finding("warn", chosen.name, f"{label}: relay runs twice on {', '.join(doubled)}")
        if missing:
            yield Finding(
                "warn",
                chosen.name,
                f"{label}: not installed for {', '.join(missing)} (known to the installed host)",
            )
        if not stale and not missing:
            yield Finding("ok", chosen.name, f"{label}: installed for {len(entries)} event(s)")
        if name == "codex" and known.executable:
            yield from _codex_trust(known.executable, where, text, cwd, client)
    if known is None and not found:
        yield Finding("ok", chosen.name, f"{chosen.title}: relay is not installed")
    if name == "claude":
        yield from _claude_code_names(chosen, env)
    if name == "gemini":
        yield from _gemini_folder_trust(chosen, cwd, env)


def _claude_code_names(chosen: Host, env: Mapping[str, str]) -> Iterator[Finding]:
    """Whether relay knows every hook event and answer field the installed Claude Code names
    in its own code (so a new release is noticed the day it is installed)."""
    from relay.hosts import claude

    executable = shutil.which(chosen.executable, path=env.get("PATH"))
    if executable is None:
        return
    try:
        names = claude.bundle_names(Path(executable), cache=claude.bundle_cache(env))
        unknown = claude.unknown_names(names)
    except Exception as exc:  # odd or unreadable host code is a finding, not a crash
        yield Finding(
            "warn",
            chosen.name,
            f"cannot tell which hook events and answer fields {executable} has: {exc}",
        )
        return
    if unknown:
        yield Finding(
            "fail",
            chosen.name,
            f"{executable} names what relay (checked against {chosen.title} {chosen.version}) "
            f"does not know: {', '.join(unknown)}; relay passes such events and fields through "
            "as hooks give them, but does not install, merge or render them as the host reads "
            "them: update relay",
        )
        return
    fields = len(names.output_fields) + sum(len(f) for f in names.specific_fields.values())
    yield Finding(
        "ok",
        chosen.name,
        f"relay knows the {len(names.events)} hook events and {fields} answer fields "
        f"{executable} names",
    )


def _gemini_folder_trust(chosen: Host, cwd: Path, env: Mapping[str, str]) -> Iterator[Finding]:
    """Where relay's MCP server is registered in Gemini CLI: does Gemini trust this folder?
    In a folder it does not trust it starts no MCP server (`gemini mcp list`: Disabled)."""
    from relay.errors import RelayError
    from relay.hosts.gemini import folder_trust
    from relay.hosts.install import decode_host_json
    from relay.hosts.mcp_config import SERVER_NAME, is_relay_server

    registered = []
    for scope in ("user", "project"):
        where = target(chosen, scope, cwd, env)
        try:
            text = read_text(where.file)
            value = decode_host_json(text, file=str(where.file)) if text else None
        except RelayError:  # a broken file is reported by the checks above
            continue
        servers = value.get("mcpServers") if isinstance(value, dict) else None
        if isinstance(servers, dict) and is_relay_server(servers.get(SERVER_NAME)):
            registered.append(where.file)
    if not registered:
        return
    trust = folder_trust(cwd, env)
    if trust.trusted:
        yield Finding(
            "ok", "gemini", f"Gemini CLI trusts {cwd} ({trust.reason}): relay's MCP server runs"
        )
        return
    root = find_project_root(cwd) or cwd
    yield Finding(
        "warn",
        "gemini",
        f"Gemini CLI does not trust {cwd} ({trust.reason}), so it starts no MCP server there "
        f"(`gemini mcp list` shows relay Disabled) and relay's tools are missing; to trust it, "
        f"run `gemini` in {root} and choose to trust the folder, or add "
        f'"{root}": "TRUST_FOLDER" to {trust.file}',
    )


def _codex_trust(
    executable: str, where: Target, text: str | None, cwd: Path, client: Client | None
) -> Iterator[Finding]:
    from relay.hosts.codex_trust import CodexError, list_hooks, relay_hooks

    file = where.file
    try:
        hooks = list_hooks(executable, cwd)
    except CodexError as exc:
        yield Finding("warn", "codex", f"cannot ask Codex which hooks it trusts: {exc}")
        return
    ours = relay_hooks(hooks, file, text, where.host)
    untrusted = [hook for hook in ours if not hook.trusted]
    if untrusted:
        yield Finding(
            "fail",
            "codex",
            f"Codex does not trust {len(untrusted)} of relay's {len(ours)} entries in {file} "
            "and skips them silently: run `relay install codex --trust`",
        )
    elif ours:
        yield Finding("ok", "codex", f"Codex trusts relay's {len(ours)} entries in {file}")


def _project_checks(cwd: Path, env: Mapping[str, str]) -> Iterator[Finding]:
    from relay.config.model import TRUST_REQUIRED
    from relay.engine.system import HookSystem
    from relay.errors import RelayError

    system = HookSystem(cwd=cwd, telemetry=False, environ=dict(env), isolate=TRUST_REQUIRED)
    try:
        system.initialize()
        hooks = system.registry.hooks
    except RelayError as exc:
        yield Finding("fail", "settings", f"relay's settings cannot be loaded: {exc}")
        return
    for problem in system.settings.problems():
        yield Finding("fail", "settings", problem)
    untrusted = [hook for hook in hooks if hook.needs_trust and not hook.trusted]
    if untrusted:
        names = ", ".join(sorted({hook.name for hook in untrusted}))
        yield Finding(
            "warn",
            "trust",
            f"{len(untrusted)} project hook(s) not trusted, skipped until `relay trust`: {names}",
        )
    else:
        count = len(hooks)
        yield Finding("ok", "settings", f"{count} hook(s) in relay's settings for {cwd}")


def _cost(client: Client, cwd: Path, env: Mapping[str, str]) -> Iterator[Finding]:
    """The wall time of an event with no hook through the installed client, as a host runs
    it (`sh -c`, the event on stdin)."""
    command = client.command(host("claude"), PROBE_EVENT)
    event = json.dumps({"session_id": "relay-doctor", "cwd": str(cwd)}).encode()
    times: list[float] = []
    for _ in range(PROBE_RUNS):
        started = time.perf_counter()
        try:
            done = subprocess.run(
                ["sh", "-c", command],
                input=event,
                capture_output=True,
                cwd=cwd,
                env=dict(env),
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            yield Finding("fail", "cost", f"the client did not answer: {exc}")
            return
        times.append((time.perf_counter() - started) * 1000)
        if done.returncode != 0:
            detail = done.stderr.decode(errors="replace").strip()[:200]
            yield Finding("fail", "cost", f"the client exited {done.returncode}: {detail}")
            return
    first, rest = times[0], times[1:]
    yield Finding(
        "ok",
        "cost",
        f"an event with no hook: {statistics.median(rest):.1f} ms (median of {len(rest)}; "
        f"the first call {first:.1f} ms) through {client.kind} client {client.argv[-1]}",
    )
