"""Which team a command or session is in, and saying it: one team per git repository (every
worktree of it), `--team` on `relay run`, `send`, `inbox`, `agents`, `messages`, the team
named in listings and in "no agent named X" errors, and hostile `.git` files. Real `relay
run` processes on the scripted agent (in a PTY), real git worktrees, one real mailbox."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from scripted_sessions import RELAY, agent, finish, reads, wait_for

from relay.services.messaging.mailbox import SqliteMailbox
from relay.services.messaging.model import project_team, repository_team

FAST = {"session": {"injectQuietMs": 100}, "messaging": {"ackTimeoutSeconds": 0.3}}


@pytest.fixture
def fast(tmp_path: Path) -> Path:
    """Quick typing and acks; no messaging.team, so the team is the repository's."""
    path = tmp_path / "fast.json"
    path.write_text(json.dumps(FAST))
    return path


@pytest.fixture
def mailbox(relay_home: Path) -> Iterator[SqliteMailbox]:
    box = SqliteMailbox(relay_home / "state" / "messages.db")
    yield box
    box.close()


@pytest.fixture
def env() -> dict[str, str]:
    environment = {**os.environ, "USER": "pat"}
    environment.pop("RELAY_TEAM", None)
    return environment


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        timeout=60,
    )


def repository(root: Path) -> Path:
    """A git repository with one commit at `root` (a worktree needs a commit)."""
    root.mkdir(parents=True)
    git(root, "init", "-q")
    git(root, "commit", "-q", "--allow-empty", "-m", "start")
    return root


def relay(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def start(
    cwd: Path,
    name: str,
    steps: list[dict[str, Any]],
    record: Path,
    env: dict[str, str],
    *options: str,
) -> subprocess.Popen[bytes]:
    """`relay run --headless --name NAME OPTIONS…` on a scripted agent, in `cwd`."""
    return subprocess.Popen(
        [RELAY, "run", "--headless", "--name", name, *options, "--", *agent(steps, record)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
    )


def live_in(mailbox: SqliteMailbox, team: str, name: str) -> Callable[[], bool]:
    return lambda: any(a.name == name and a.state != "offline" for a in mailbox.agents(team))


def stopped(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.communicate()


# -- one team per repository ----------------------------------------------------------------


def test_two_worktrees_of_one_repository_are_one_team(
    tmp_path: Path, fast: Path, mailbox: SqliteMailbox, env: dict[str, str]
) -> None:
    """Bob runs in a linked worktree; a message sent from the main checkout reaches him,
    and both checkouts list him under the main checkout's team name."""
    main = repository(tmp_path / "shop")
    git(main, "worktree", "add", "-q", str(tmp_path / "shop-feature"))
    feature = tmp_path / "shop-feature"
    team = project_team(main)
    bob = start(
        feature,
        "Bob",
        [{"print": "ready"}, {"read": "mail"}, {"sleep": 0.6}, {"exit": 0}],
        tmp_path / "bob.jsonl",
        env,
        "--settings",
        str(fast),
    )
    try:
        wait_for(live_in(mailbox, team, "Bob"), f"Bob to be live in team {team}")
        sent = relay(main, env, "send", "Bob", "hello from main", "--settings", str(fast))
        assert sent.returncode == 0, sent.stderr
        assert finish(bob)[0] == 0
    finally:
        stopped(bob)
    [(_, line)] = reads(tmp_path / "bob.jsonl")
    assert line.startswith("Relay message from pat [") and line.endswith("]: hello from main")
    for checkout in (main, feature, feature / "deeper"):
        checkout.mkdir(exist_ok=True)
        listed = relay(checkout, env, "agents")
        assert listed.stdout.splitlines()[0] == f"team {team}: 1 agent, 1 human", listed.stdout
    sessions = relay(main, env, "sessions", "--json")
    assert json.loads(sessions.stdout) == []  # Bob ended


def test_a_main_checkout_keeps_its_team_and_its_mail_reaches_a_worktree(
    tmp_path: Path, fast: Path, mailbox: SqliteMailbox, env: dict[str, str]
) -> None:
    """Mail queued for Ann in the main checkout's team (as named before worktrees shared
    it) is still hers, and reaches her when she starts in a linked worktree."""
    main = repository(tmp_path / "shop")
    git(main, "worktree", "add", "-q", str(tmp_path / "wt"))
    old_team = project_team(main)  # the name a main checkout's team has always had
    assert repository_team(main) == old_team
    mailbox.register_agent("Ann", team=old_team, session_id="earlier", cwd=str(main))
    mailbox.set_presence("Ann", team=old_team, session_id="earlier", state="offline")
    queued, _ = mailbox.send(
        team=old_team, sender="pat", recipient="Ann", body="while you were out"
    )
    inbox = relay(tmp_path / "wt", env, "inbox", "Ann")
    assert inbox.stdout.splitlines()[0] == f"team {old_team}, Ann's inbox: 1 waiting message"
    ann = start(
        tmp_path / "wt",
        "Ann",
        [{"print": "ready"}, {"read": "mail"}, {"sleep": 0.6}, {"exit": 0}],
        tmp_path / "ann.jsonl",
        env,
        "--settings",
        str(fast),
    )
    try:
        assert finish(ann)[0] == 0
    finally:
        stopped(ann)
    assert reads(tmp_path / "ann.jsonl") == [
        ("mail", f"Relay message from pat [{queued.short_id}]: while you were out")
    ]


def test_a_bare_repository_and_its_worktrees_are_one_team(tmp_path: Path) -> None:
    """A bare clone's worktrees, and a `.bare` folder kept in the folder of its worktrees,
    each share one team named for the repository; a submodule-like checkout of its own
    git folder keeps its folder's team."""
    origin = repository(tmp_path / "origin")
    git(tmp_path, "clone", "-q", "--bare", str(origin), "shop.git")
    for name in ("one", "two"):
        git(tmp_path / "shop.git", "worktree", "add", "-q", str(tmp_path / name))
    team = repository_team(tmp_path / "one")
    assert team == repository_team(tmp_path / "two") and team.startswith("shop-")
    container = tmp_path / "app"
    container.mkdir()
    git(container, "clone", "-q", "--bare", str(origin), ".bare")
    (container / ".git").write_text("gitdir: ./.bare\n")
    git(container, "worktree", "add", "-q", "main")
    assert repository_team(container) == repository_team(container / "main")
    assert repository_team(container).startswith("app-")
    separate = tmp_path / "separate"
    git(tmp_path, "init", "-q", f"--separate-git-dir={tmp_path / 'store.git'}", str(separate))
    assert repository_team(separate) == project_team(separate)


# -- --team on every command ----------------------------------------------------------------


def test_team_option_on_run_send_inbox_agents_messages_and_sessions(
    tmp_path: Path, fast: Path, mailbox: SqliteMailbox, env: dict[str, str]
) -> None:
    """`relay run --team blue`: the agent is in team blue, and so are its own `relay`
    commands and its host's hooks ($RELAY_TEAM); the human reaches it with --team blue on
    each command, and each listing names the team."""
    project = repository(tmp_path / "proj")
    go = tmp_path / "go"
    hook_prompt = {"hook_event_name": "UserPromptSubmit", "prompt": "next"}
    steps = [
        {"print": "ready"},
        {"shell": f"{RELAY} agents", "label": "agents"},
        {"shell": f"while [ ! -e '{go}' ]; do sleep 0.05; done", "label": "waited"},
        {"hook": "UserPromptSubmit", "payload": hook_prompt, "label": "hook"},
        {"sleep": 0.3},
        {"exit": 0},
    ]
    record = tmp_path / "bob.jsonl"
    bob = start(project, "Bob", steps, record, env, "--team", "blue", "--no-inject")
    try:
        wait_for(live_in(mailbox, "blue", "Bob"), "Bob to be live in team blue")
        listed = relay(project, env, "sessions")
        assert "team blue" in listed.stdout, listed.stdout
        sessions = json.loads(relay(project, env, "sessions", "--json").stdout)
        assert [(s["name"], s["team"]) for s in sessions] == [("Bob", "blue")]
        wrong = relay(project, env, "send", "Bob", "hi")
        assert wrong.returncode == 1
        sent = relay(project, env, "send", "--team", "blue", "Bob", "hi blue", "--json")
        assert sent.returncode == 0, sent.stderr
        message = json.loads(sent.stdout)["message"]
        assert message["team"] == "blue"
        inbox = relay(project, env, "inbox", "--team", "blue", "Bob")
        assert inbox.stdout.splitlines()[0] == "team blue, Bob's inbox: 1 waiting message"
        go.touch()
        assert finish(bob)[0] == 0
    finally:
        stopped(bob)
    answers = dict(reads(record))
    assert answers["agents"].splitlines()[0] == "0 team blue: 1 agent, 0 humans"
    context = json.loads(answers["hook"])["hookSpecificOutput"]["additionalContext"]
    assert "Relay message from pat" in context and "hi blue" in context
    agents = relay(project, env, "agents", "--team", "blue")
    assert agents.stdout.splitlines()[0] == "team blue: 1 agent, 1 human"
    history = relay(project, env, "messages", "--team", "blue")
    assert history.stdout.splitlines()[0] == "team blue: 1 message, oldest first"
    assert "pat -> Bob: hi blue" in history.stdout
    assert (
        relay(project, env, "messages").stdout
        == f"no messages yet in team {project_team(project)}\n"
    )
    everything = relay(project, env, "inbox", "--team", "blue", "--all", "Bob")
    assert everything.stdout.splitlines()[0] == "team blue, Bob's inbox: 1 message"
    assert "acked" in everything.stdout
    bad = relay(project, env, "agents", "--team", "no good")
    assert bad.returncode == 1 and "team name 'no good' is not usable" in bad.stderr
    refused = relay(project, env, "run", "--team", "a.b", "--", "true")
    assert refused.returncode == 1 and "team name 'a.b' is not usable" in refused.stderr


def test_relay_runs_own_hooks_are_in_the_sessions_team(
    tmp_path: Path, relay_home: Path, env: dict[str, str]
) -> None:
    """`relay run --team blue`: the hooks relay runs for the session itself (SessionStart
    here) see RELAY_TEAM=blue, as the agent and its host's hooks do, so a `relay send` from
    one of them goes to the session's team."""
    project = repository(tmp_path / "proj")
    seen = tmp_path / "team.txt"
    record = f'cat >/dev/null; printf %s "$RELAY_TEAM" > {seen}; echo {{}}'
    settings = {"hooks": {"SessionStart": [{"hooks": [{"command": "sh", "args": ["-c", record]}]}]}}
    (relay_home / "settings.json").write_text(json.dumps(settings))
    steps = [{"print": "ready"}, {"exit": 0}]
    bob = start(project, "Bob", steps, tmp_path / "bob.jsonl", env, "--team", "blue")
    try:
        assert finish(bob)[0] == 0
    finally:
        stopped(bob)
    assert seen.read_text() == "blue"


# -- errors that say where an agent is -------------------------------------------------------


def test_sending_from_the_parent_folder_says_which_team_bob_is_in(
    tmp_path: Path, fast: Path, mailbox: SqliteMailbox, env: dict[str, str]
) -> None:
    """The issue's newcomer: Bob runs in /…/shop, `relay send Bob hi` from the folder above
    fails, and the error names Bob's team, where he started and the command that reaches
    him; that command works. A name no team knows gets how an agent joins."""
    shop = repository(tmp_path / "shop")
    parent = tmp_path
    shop_team, here = project_team(shop), project_team(parent)
    bob = start(
        shop,
        "Bob",
        [{"print": "ready"}, {"read": "mail"}, {"sleep": 0.6}, {"exit": 0}],
        tmp_path / "bob.jsonl",
        env,
        "--settings",
        str(fast),
    )
    try:
        wait_for(live_in(mailbox, shop_team, "Bob"), "Bob to be live")
        assert "Bob" in relay(parent, env, "sessions").stdout
        failed = relay(parent, env, "send", "Bob", "hi")
        assert failed.returncode == 1
        assert (
            f"no agent named Bob in team {here}; known: none yet; Bob is in team {shop_team} "
            f"(live, started in {shop}): relay send --team {shop_team} Bob …"
        ) in failed.stderr
        nobody = relay(parent, env, "send", "Zed", "hi")
        assert nobody.returncode == 1
        assert (
            f"no agent named Zed in team {here}; known: none yet; no team on this machine knows "
            f"Zed: an agent joins team {here} with `relay run --name Zed --team {here} -- "
            "COMMAND`"
        ) in nobody.stderr
        reached = relay(parent, env, "send", "--team", shop_team, "Bob", "hi")
        assert reached.returncode == 0, reached.stderr
        assert finish(bob)[0] == 0
    finally:
        stopped(bob)
    assert reads(tmp_path / "bob.jsonl")[0][1].endswith(": hi")
    # Offline now: still named, with where it was last.
    forgot = relay(parent, env, "agents", "forget", "Bob")
    assert forgot.returncode == 1
    assert (
        f"Bob is in team {shop_team} (offline, last in {shop}): "
        f"relay agents forget --team {shop_team} Bob"
    ) in forgot.stderr
    empty = relay(parent, env, "agents")
    assert empty.stdout.startswith(f"no agents yet in team {here} (an agent joins with ")


def test_an_error_shows_a_hostile_folder_name_inert(
    tmp_path: Path, mailbox: SqliteMailbox, env: dict[str, str]
) -> None:
    """The folder an agent started in is shown with its control characters made visible."""
    mailbox.register_agent("Bob", team="other", session_id="s", cwd="/src/\x1b]52;c;x\x07evil")
    failed = relay(tmp_path, env, "send", "Bob", "hi")
    assert failed.returncode == 1
    assert "(live, started in /src/^[]52;c;x^Gevil)" in failed.stderr
    assert "\x1b" not in failed.stderr


# -- hostile .git files -----------------------------------------------------------------------


def _huge(project: Path, victim: Path) -> None:
    with (project / ".git").open("wb") as stream:
        stream.write(b"gitdir: " + b"a/" * (5 << 20))


def _fifo(project: Path, victim: Path) -> None:
    os.mkfifo(project / ".git")


def _device(project: Path, victim: Path) -> None:
    (project / ".git").symlink_to("/dev/zero")


def _loop(project: Path, victim: Path) -> None:
    (project / ".git").symlink_to(project / ".git")


def _not_utf8(project: Path, victim: Path) -> None:
    (project / ".git").write_bytes(b"gitdir: \xff\xfe\x80/x\n")


def _nul(project: Path, victim: Path) -> None:
    (project / ".git").write_bytes(b"gitdir: /tmp\0/x\n")


def _root(project: Path, victim: Path) -> None:
    (project / ".git").write_text("gitdir: /\n")


def _itself(project: Path, victim: Path) -> None:
    (project / ".git").write_text("gitdir: .\n")
    (project / "commondir").write_text(".\n")


def _victims_git_folder(project: Path, victim: Path) -> None:
    (project / ".git").write_text(f"gitdir: {victim / '.git'}\n")


def _victims_worktree(project: Path, victim: Path) -> None:
    """The admin folder of one of the victim's real worktrees (it names its own checkout)."""
    (project / ".git").write_text(f"gitdir: {victim / '.git' / 'worktrees' / 'feature'}\n")


def _fake_admin_folder(project: Path, victim: Path) -> None:
    """An admin folder of the attacker's own whose commondir names the victim's repository
    and whose gitdir names this checkout back."""
    fake = project / "fake"
    fake.mkdir()
    (fake / "HEAD").write_text("ref: refs/heads/main\n")
    (fake / "commondir").write_text(f"{victim / '.git'}\n")
    (fake / "gitdir").write_text(f"{project / '.git'}\n")
    (project / ".git").write_text("gitdir: fake\n")


def _commondir_fifo(project: Path, victim: Path) -> None:
    fake = project / "fake"
    fake.mkdir()
    os.mkfifo(fake / "commondir")
    (project / ".git").write_text("gitdir: fake\n")


@pytest.mark.parametrize(
    "make",
    [
        _huge,
        _fifo,
        _device,
        _loop,
        _not_utf8,
        _nul,
        _root,
        _itself,
        _victims_git_folder,
        _victims_worktree,
        _fake_admin_folder,
        _commondir_fifo,
    ],
)
def test_a_hostile_git_file_never_crashes_hangs_or_joins_another_team(
    tmp_path: Path, env: dict[str, str], make: Callable[[Path, Path], None]
) -> None:
    """Whatever `.git` holds, the project is in its folder's own team, and `relay agents`
    answers (a FIFO or /dev/zero read would block or never end)."""
    victim = repository(tmp_path / "victim")
    git(victim, "worktree", "add", "-q", str(tmp_path / "feature"))
    project = tmp_path / "project"
    project.mkdir()
    make(project, victim)
    assert repository_team(project) == project_team(project)
    assert repository_team(project) != repository_team(victim)
    listed = relay(project, env, "agents")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"no agents yet in team {project_team(project)} ")


def test_relative_worktree_paths_are_followed(tmp_path: Path) -> None:
    """Git 2.48's relative worktree links (worktree.useRelativePaths) name the same team."""
    main = repository(tmp_path / "shop")
    git(main, "worktree", "add", "-q", str(tmp_path / "wt"))
    admin = main / ".git" / "worktrees" / "wt"
    (tmp_path / "wt" / ".git").write_text("gitdir: ../shop/.git/worktrees/wt\n")
    (admin / "gitdir").write_text("../../../../wt/.git\n")
    assert repository_team(tmp_path / "wt") == project_team(main)
