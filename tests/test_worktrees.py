"""Agents' git worktrees: made on first start from HEAD, kept after, nothing half-made."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.fleet import worktrees
from relay.fleet.model import AgentSpec, Team
from relay.fleet.teamfile import load_team
from relay.fleet.worktrees import WorktreeError, ensure_worktree, worktree_path


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch: pytest.MonkeyPatch) -> None:
    """git reads no configuration of the machine's or the user's."""
    for name in list(os.environ):
        if name.startswith("GIT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def git(folder: Path, *args: str) -> str:
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]
    done = subprocess.run(
        ["git", *identity, "-C", str(folder), *args], check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A git repository with one commit."""
    folder = tmp_path / "repository"
    folder.mkdir()
    git(folder, "init", "-q", "-b", "main")
    (folder / "README").write_text("hello\n")
    git(folder, "add", "README")
    git(folder, "commit", "-q", "-m", "first")
    return folder


def team_in(folder: Path, *names: str) -> Team:
    """A team whose file is in `folder`, its agents each with worktree = true."""
    agents = [AgentSpec(name=name, command=["sh"], worktree=True) for name in names]
    return Team(name="t", file=str(folder / "relay.team.toml"), root=str(folder), agents=agents)


def worktree_list(folder: Path) -> list[str]:
    return [
        line.removeprefix("worktree ")
        for line in git(folder, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


def branches(folder: Path) -> list[str]:
    return git(folder, "branch", "--format=%(refname:short)").splitlines()


def test_made_on_first_start_from_head_and_never_committed(repository: Path) -> None:
    team = team_in(repository, "alice")
    path = ensure_worktree(team, team.agents[0])
    assert path == repository / ".relay" / "worktrees" / "alice"
    assert worktree_path(team, team.agents[0]) == path
    assert (path / "README").read_text() == "hello\n"
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == "relay/alice"
    assert git(path, "rev-parse", "HEAD") == git(repository, "rev-parse", "HEAD")
    assert worktree_list(repository) == [str(repository), str(path)]
    exclude = (repository / ".git" / "info" / "exclude").read_text()
    assert exclude.splitlines()[-1] == "/.relay/worktrees/"
    # Nothing of it shows as a change of the repository, so nothing is committed by accident.
    assert git(repository, "status", "--porcelain", "--untracked-files=all") == ""


def test_kept_as_it_is_on_later_starts(repository: Path) -> None:
    team = team_in(repository, "alice")
    path = ensure_worktree(team, team.agents[0])
    (path / "work.txt").write_text("the agent's work\n")
    git(path, "add", "work.txt")
    git(path, "commit", "-q", "-m", "work")
    (path / "unsaved.txt").write_text("not committed\n")
    agent_head = git(path, "rev-parse", "HEAD")
    (repository / "README").write_text("moved on\n")
    git(repository, "commit", "-q", "-am", "main moves on")

    assert ensure_worktree(team, team.agents[0]) == path
    assert git(path, "rev-parse", "HEAD") == agent_head
    assert (path / "unsaved.txt").read_text() == "not committed\n"
    assert (path / "README").read_text() == "hello\n"
    exclude = (repository / ".git" / "info" / "exclude").read_text()
    assert exclude.count("/.relay/worktrees/") == 1


def test_a_worktree_switched_to_another_branch_is_kept(repository: Path) -> None:
    team = team_in(repository, "alice")
    path = ensure_worktree(team, team.agents[0])
    git(path, "switch", "-q", "-c", "experiment")
    assert ensure_worktree(team, team.agents[0]) == path
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == "experiment"


def test_an_existing_branch_is_checked_out_with_its_commits(repository: Path) -> None:
    git(repository, "branch", "relay/bob")
    git(repository, "switch", "-q", "relay/bob")
    (repository / "bob.txt").write_text("earlier work\n")
    git(repository, "add", "bob.txt")
    git(repository, "commit", "-q", "-m", "bob's earlier work")
    bob_head = git(repository, "rev-parse", "HEAD")
    git(repository, "switch", "-q", "main")

    team = team_in(repository, "bob")
    path = ensure_worktree(team, team.agents[0])
    assert git(path, "rev-parse", "HEAD") == bob_head
    assert (path / "bob.txt").read_text() == "earlier work\n"


def test_a_deleted_worktree_is_made_again_on_its_branch(repository: Path) -> None:
    team = team_in(repository, "alice")
    path = ensure_worktree(team, team.agents[0])
    (path / "work.txt").write_text("kept in a commit\n")
    git(path, "add", "work.txt")
    git(path, "commit", "-q", "-m", "work")
    subprocess.run(["rm", "-rf", str(path)], check=True)

    assert ensure_worktree(team, team.agents[0]) == path
    assert (path / "work.txt").read_text() == "kept in a commit\n"
    assert worktree_list(repository) == [str(repository), str(path)]


def test_worktrees_sit_at_the_top_of_the_repository(repository: Path) -> None:
    (repository / "services").mkdir()
    team = team_in(repository / "services", "carol")
    path = ensure_worktree(team, team.agents[0])
    assert path == repository / ".relay" / "worktrees" / "carol"


def test_a_callers_git_variables_do_not_redirect_git(
    repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    # As when relay runs from a git hook of another repository.
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    team = team_in(repository, "alice")
    path = ensure_worktree(team, team.agents[0])
    assert path == repository / ".relay" / "worktrees" / "alice"
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name)
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == "relay/alice"
    assert worktree_list(other) == [str(other)]
    assert branches(other) == []


# -- what cannot be made, and nothing left of it --------------------------------------------


def nothing_made(repository: Path, name: str, *, relay_folder: bool = False) -> None:
    """No worktree, branch or folder of the agent's is left."""
    assert worktree_list(repository) == [str(repository)]
    assert f"relay/{name}" not in branches(repository)
    assert not os.path.lexists(repository / ".relay" / "worktrees" / name)
    assert (repository / ".relay").exists() is relay_folder


def test_not_a_repository(tmp_path: Path) -> None:
    team = team_in(tmp_path, "alice")
    with pytest.raises(WorktreeError) as caught:
        ensure_worktree(team, team.agents[0])
    assert str(caught.value) == (
        f"agent 'alice': cannot make its worktree: {tmp_path} is not in a git repository"
    )
    assert caught.value.agent == "alice"
    assert list(tmp_path.iterdir()) == [tmp_path / "relay-home"]


def test_a_repository_without_a_commit(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    team = team_in(tmp_path, "alice")
    with pytest.raises(WorktreeError) as caught:
        ensure_worktree(team, team.agents[0])
    assert str(caught.value) == (
        f"agent 'alice': cannot make its worktree: the repository {tmp_path} has no commit"
        " yet (worktrees start from HEAD)"
    )
    assert not (tmp_path / ".relay").exists()


def test_git_missing(repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    team = team_in(repository, "alice")
    with pytest.raises(WorktreeError) as caught:
        ensure_worktree(team, team.agents[0])
    assert str(caught.value) == (
        "agent 'alice': cannot make its worktree: git is not installed (not found on PATH)"
    )
    monkeypatch.undo()
    nothing_made(repository, "alice")


def test_its_branch_checked_out_elsewhere(repository: Path) -> None:
    git(repository, "switch", "-q", "-c", "relay/alice")
    team = team_in(repository, "alice")
    with pytest.raises(WorktreeError) as caught:
        ensure_worktree(team, team.agents[0])
    assert str(caught.value) == (
        f"agent 'alice': cannot make its worktree: its branch relay/alice is checked out at"
        f" {repository}"
    )
    assert worktree_list(repository) == [str(repository)]
    assert not (repository / ".relay").exists()


@pytest.mark.parametrize("kind", ["file", "folder", "link"])
def test_something_in_the_way(repository: Path, kind: str) -> None:
    place = repository / ".relay" / "worktrees" / "alice"
    place.parent.mkdir(parents=True)
    if kind == "file":
        place.write_text("mine\n")
    elif kind == "folder":
        place.mkdir()
        (place / "notes.txt").write_text("mine\n")
    else:
        place.symlink_to(repository)
    team = team_in(repository, "alice")
    with pytest.raises(WorktreeError) as caught:
        ensure_worktree(team, team.agents[0])
    reason = (
        f"a folder that is not a worktree of {repository}"
        if kind == "folder"
        else "it exists and is not its worktree"
    )
    assert (
        str(caught.value)
        == f"agent 'alice': cannot make its worktree: {place} is in the way: {reason}"
    )
    if kind == "file":
        assert place.read_text() == "mine\n"
    elif kind == "folder":
        assert (place / "notes.txt").read_text() == "mine\n"
    else:
        assert place.is_symlink()
    assert worktree_list(repository) == [str(repository)]
    assert "relay/alice" not in branches(repository)


def test_a_file_where_the_worktrees_folder_goes(repository: Path) -> None:
    (repository / ".relay").write_text("a file\n")
    team = team_in(repository, "alice")
    with pytest.raises(WorktreeError) as caught:
        ensure_worktree(team, team.agents[0])
    assert str(caught.value) == (
        f"agent 'alice': cannot make its worktree: {repository / '.relay'} is in the way: it"
        " is not a folder"
    )
    assert (repository / ".relay").read_text() == "a file\n"


def test_an_empty_folder_in_its_place_is_used(repository: Path) -> None:
    place = repository / ".relay" / "worktrees" / "alice"
    place.mkdir(parents=True)
    team = team_in(repository, "alice")
    assert ensure_worktree(team, team.agents[0]) == place
    assert (place / "README").exists()


def test_a_branch_git_cannot_make_leaves_nothing(repository: Path) -> None:
    git(repository, "branch", "relay")  # refs/heads/relay: no relay/NAME can exist beside it
    team = team_in(repository, "alice")
    with pytest.raises(WorktreeError) as caught:
        ensure_worktree(team, team.agents[0])
    assert caught.value.reason.startswith("cannot lock ref 'refs/heads/relay/alice'")
    nothing_made(repository, "alice")


def hook(repository: Path, script: str) -> None:
    path = repository / ".git" / "hooks" / "post-checkout"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def test_a_checkout_that_fails_leaves_nothing(repository: Path) -> None:
    hook(repository, 'echo "refused by policy" >&2\nexit 3\n')
    team = team_in(repository, "alice")
    with pytest.raises(WorktreeError) as caught:
        ensure_worktree(team, team.agents[0])
    assert caught.value.reason == "refused by policy"
    nothing_made(repository, "alice")
    # Once the hook is gone the worktree is made.
    (repository / ".git" / "hooks" / "post-checkout").unlink()
    assert ensure_worktree(team, team.agents[0]).is_dir()


def test_a_checkout_past_its_timeout_is_killed_with_its_hook_and_leaves_nothing(
    repository: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = repository.parent / "hook.pid"
    hook(repository, f"echo $$ > {pid_file}\nexec sleep 120\n")
    monkeypatch.setattr(worktrees, "GIT_CHECKOUT_TIMEOUT", 3.0)
    team = team_in(repository, "alice")
    with pytest.raises(WorktreeError) as caught:
        ensure_worktree(team, team.agents[0])
    assert caught.value.reason == "git worktree did not finish within 3 seconds"
    nothing_made(repository, "alice")
    assert wait_gone(int(pid_file.read_text()))


def wait_gone(pid: int) -> bool:
    """Whether the process ends (or is a zombie waiting for a reaper) within 30 s."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


# -- the team file's worktree agents ----------------------------------------------------------


@pytest.fixture
def team_file(repository: Path) -> Iterator[Path]:
    path = repository / "relay.team.toml"
    path.write_text(
        '[[agent]]\nname = "alice"\ncommand = "sh"\nworktree = true\n'
        '[[agent]]\nname = "bob"\ncommand = "sh"\nworktree = true\n'
    )
    yield path


def test_each_worktree_agent_of_a_team_file_gets_its_own(team_file: Path, repository: Path) -> None:
    team = load_team(team_file)
    paths = [ensure_worktree(team, agent) for agent in team.agents]
    assert paths == [repository / ".relay" / "worktrees" / name for name in ("alice", "bob")]
    assert sorted(branches(repository)) == ["main", "relay/alice", "relay/bob"]
    assert git(repository, "status", "--porcelain") == "?? relay.team.toml"


def test_a_hook_that_leaves_its_session_holding_gits_output_does_not_hang_relay(
    repository: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = repository.parent / "daemon.pid"
    hook(repository, f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 120' &\nexit 0\n")
    monkeypatch.setattr(worktrees, "GIT_CHECKOUT_TIMEOUT", 3.0)
    team = team_in(repository, "alice")
    try:
        with pytest.raises(WorktreeError) as caught:
            ensure_worktree(team, team.agents[0])
        assert caught.value.reason == "git worktree did not finish within 3 seconds"
        nothing_made(repository, "alice")
    finally:
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(int(pid_file.read_text()), 9)  # it left relay's reach: the test ends it


def test_a_deleted_worktree_that_git_keeps_locked_is_said_so(repository: Path) -> None:
    team = team_in(repository, "alice")
    path = ensure_worktree(team, team.agents[0])
    git(repository, "worktree", "lock", str(path))
    subprocess.run(["rm", "-rf", str(path)], check=True)
    with pytest.raises(WorktreeError) as caught:
        ensure_worktree(team, team.agents[0])
    assert caught.value.reason == (
        "its folder is gone but git keeps its worktree entry (locked); `git worktree remove"
        f" --force --force {path}` forgets it"
    )
    git(repository, "worktree", "remove", "--force", "--force", str(path))
    assert ensure_worktree(team, team.agents[0]) == path
    assert (path / "README").exists()
