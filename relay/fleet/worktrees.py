"""An agent's own git worktree and branch (`worktree = true` in the team file).

Each such agent works in `<repository>/.relay/worktrees/<name>` on the branch
`relay/<name>`, made from the current HEAD on its first start and kept as it is from then
on (never reset: it holds the agent's work). The folder sits inside the repository, where
claude-squad users and Claude Code's own `--worktree` put theirs, so the agent's files are
one `cd` away, and git lists it with `git worktree list`; `/.relay/worktrees/` is added to
the repository's `info/exclude` so that it is never committed by accident.

git runs with a bounded timeout, in its own process group (a checkout hook it starts is
ended with it), without the caller's repository variables (GIT_DIR from a git hook that
ran relay must not redirect it), and never asks on the terminal.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import NamedTuple

from relay.errors import RelayError
from relay.fleet.model import AgentSpec, Team

WORKTREES_FOLDER = Path(".relay") / "worktrees"
"""Where agents' worktrees are made, relative to the repository's top folder."""
BRANCH_PREFIX = "relay/"
EXCLUDE_LINE = "/.relay/worktrees/"
"""The line added to the repository's `info/exclude`."""
GIT_TIMEOUT = 30.0
"""Seconds a git query may take."""
GIT_CHECKOUT_TIMEOUT = 300.0
"""Seconds `git worktree add` may take (it checks out the whole tree, and runs the
repository's post-checkout hook)."""

# What git itself clears when it enters another repository (`git rev-parse
# --local-env-vars`): a caller's GIT_DIR or GIT_INDEX_FILE would point git elsewhere.
_REPOSITORY_VARIABLES = frozenset(
    {
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_OBJECT_DIRECTORY",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_GRAFT_FILE",
        "GIT_INDEX_FILE",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_REPLACE_REF_BASE",
        "GIT_PREFIX",
        "GIT_INTERNAL_SUPER_PREFIX",
        "GIT_SHALLOW_FILE",
        "GIT_COMMON_DIR",
        "GIT_QUARANTINE_PATH",
    }
)
_STDERR_LINES = 5
_PROGRESS = ("Preparing worktree", "HEAD is now at", "Updating files")


class WorktreeError(RelayError):
    """An agent's worktree that cannot be made: names the agent and why."""

    def __init__(self, reason: str, *, agent: str, path: str | None = None) -> None:
        self.reason = reason
        self.agent = agent
        self.path = path
        super().__init__(f"agent {agent!r}: cannot make its worktree: {reason}")


class GitResult(NamedTuple):
    """How one git command ended: a failure to start it or its timeout are data too."""

    code: int
    """Its exit code; -1 when it did not start or was killed at its timeout."""
    stdout: str
    stderr: str
    problem: str | None = None
    """Why it did not run to its end (git missing, timed out), else None."""

    @property
    def ok(self) -> bool:
        """Whether git ran and exited 0."""
        return self.problem is None and self.code == 0

    def reason(self) -> str:
        """What went wrong, in words: the problem, else the first lines of git's stderr."""
        if self.problem is not None:
            return self.problem
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        # git's own failures say fatal: or error:; a failing hook's lines are its own words.
        # Its progress lines ("Preparing worktree ...") are not the reason.
        failures = [line for line in lines if line.startswith(("fatal: ", "error: "))]
        said = failures or [line for line in lines if not line.startswith(_PROGRESS)]
        text = "; ".join(
            line.removeprefix("fatal: ").removeprefix("error: ") for line in said[:_STDERR_LINES]
        )
        return text or f"git exited with code {self.code}"


def run_git(folder: Path, *args: str, timeout: float = GIT_TIMEOUT) -> GitResult:
    """Run `git -C folder ARGS` with a clean environment and a timeout."""
    program = shutil.which("git")
    if program is None:
        return GitResult(-1, "", "", "git is not installed (not found on PATH)")
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in _REPOSITORY_VARIABLES
        and not name.startswith("GIT_CONFIG_KEY_")
        and not name.startswith("GIT_CONFIG_VALUE_")
    }
    environment["GIT_TERMINAL_PROMPT"] = "0"
    try:
        process = subprocess.Popen(
            [program, "-C", str(folder), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
            start_new_session=True,  # its hooks are killed with it at the timeout
        )
    except OSError as exc:
        return GitResult(-1, "", "", f"cannot run git: {exc.strerror or exc}")
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        return GitResult(-1, "", "", f"git {args[0]} did not finish within {timeout:g} seconds")
    except BaseException:
        _kill_group(process)  # Ctrl-C: git and its hooks go too
        raise
    return GitResult(
        process.returncode,
        stdout.decode("utf-8", "replace"),
        stderr.decode("utf-8", "replace"),
    )


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    # Not read to their end: a hook that left its session may hold them open for ever.
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def repository_top(folder: Path) -> Path:
    """The top folder of the git work tree holding `folder`; raise WorktreeError (agent "")
    when there is none or git cannot say."""
    found = run_git(folder, "rev-parse", "--show-toplevel")
    if found.problem is not None:
        raise WorktreeError(found.problem, agent="")
    if not found.ok or not found.stdout.strip():
        raise WorktreeError(f"{folder} is not in a git repository", agent="")
    return Path(found.stdout.rstrip("\n"))


def worktree_problem(folder: Path) -> str | None:
    """Why agents of a team in `folder` cannot have worktrees (git missing, not in a git
    work tree, no commit yet), or None when they can."""
    try:
        top = repository_top(folder)
    except WorktreeError as exc:
        return exc.reason
    head = run_git(top, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if head.problem is not None:
        return head.problem
    if not head.ok:
        return f"the repository {top} has no commit yet (worktrees start from HEAD)"
    return None


def branch_name(agent: AgentSpec) -> str:
    """The agent's branch: `relay/NAME`."""
    return BRANCH_PREFIX + agent.name


def worktree_path(team: Team, agent: AgentSpec) -> Path:
    """Where the agent's worktree is (or will be): `<repository>/.relay/worktrees/NAME`;
    raise WorktreeError when the team's folder is not in a git repository."""
    try:
        return repository_top(Path(team.root)) / WORKTREES_FOLDER / agent.name
    except WorktreeError as exc:
        raise WorktreeError(exc.reason, agent=agent.name) from None


def ensure_worktree(team: Team, agent: AgentSpec) -> Path:
    """The agent's worktree, made with its branch from the current HEAD on first use and
    reused as it is after; raise WorktreeError, leaving nothing half-made, when it cannot."""
    try:
        top = repository_top(Path(team.root))
    except WorktreeError as exc:
        raise WorktreeError(exc.reason, agent=agent.name) from None
    return _Maker(top, agent).ensure()


class _Worktree(NamedTuple):
    path: str
    branch: str | None
    """`refs/heads/...`, or None for a detached HEAD."""
    present: bool
    """Whether its folder exists (git marks a missing one prunable)."""


class _Maker:
    """Makes or finds one agent's worktree in the repository whose top folder is `top`."""

    def __init__(self, top: Path, agent: AgentSpec) -> None:
        self.top = top
        self.agent = agent.name
        self.path = top / WORKTREES_FOLDER / agent.name
        self.branch = branch_name(agent)
        self.ref = "refs/heads/" + self.branch

    def fail(self, reason: str) -> WorktreeError:
        return WorktreeError(reason, agent=self.agent, path=str(self.path))

    def git(self, *args: str, timeout: float = GIT_TIMEOUT) -> GitResult:
        return run_git(self.top, *args, timeout=timeout)

    def ensure(self) -> Path:
        worktrees = self.worktrees()
        mine = self.find(worktrees)
        if mine is not None and mine.present:
            return self.path  # kept as it is: it holds the agent's work
        head = self.git("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        if head.problem is not None:
            raise self.fail(head.problem)
        if not head.ok:
            raise self.fail(
                f"the repository {self.top} has no commit yet (worktrees start from HEAD)"
            )
        if mine is not None:
            # Its folder was deleted: forget the stale entry, then make it again below
            # (on its branch, which kept the agent's commits).
            self.check(self.git("worktree", "prune"))
            worktrees = self.worktrees()
            if self.find(worktrees) is not None:  # a locked entry is not pruned
                raise self.fail(
                    f"its folder is gone but git keeps its worktree entry (locked); `git"
                    f" worktree remove --force --force {self.path}` forgets it"
                )
        self.check_way_is_clear()
        branch_exists = self.git("rev-parse", "--verify", "--quiet", self.ref).ok
        if branch_exists:
            for other in worktrees:
                if other.branch == self.ref:
                    raise self.fail(f"its branch {self.branch} is checked out at {other.path}")
        self.exclude()
        self.add(head.stdout.strip(), branch_exists=branch_exists)
        return self.path

    def worktrees(self) -> list[_Worktree]:
        listed = self.check(self.git("worktree", "list", "--porcelain"))
        found: list[_Worktree] = []
        for record in listed.stdout.split("\n\n"):
            fields = dict(
                (line.partition(" ")[0], line.partition(" ")[2]) for line in record.splitlines()
            )
            if "worktree" in fields:
                path = fields["worktree"]
                present = "prunable" not in fields and os.path.isdir(path)
                found.append(_Worktree(path, fields.get("branch"), present))
        return found

    def find(self, worktrees: list[_Worktree]) -> _Worktree | None:
        # The folder's own name is not resolved: a link in its place that points to another
        # worktree (the main one) is not this agent's worktree.
        mine = os.path.join(os.path.realpath(self.path.parent), self.path.name)
        for worktree in worktrees:
            if os.path.realpath(worktree.path) == mine:
                return worktree
        return None

    def check_way_is_clear(self) -> None:
        for folder in (self.top / ".relay", self.top / WORKTREES_FOLDER):
            if os.path.lexists(folder) and not folder.is_dir():
                raise self.fail(f"{folder} is in the way: it is not a folder")
        if not os.path.lexists(self.path):
            return
        if self.path.is_symlink() or not self.path.is_dir():
            raise self.fail(f"{self.path} is in the way: it exists and is not its worktree")
        try:
            empty = not any(self.path.iterdir())
        except OSError as exc:
            raise self.fail(f"{self.path} is in the way: {exc.strerror or exc}") from None
        if not empty:
            raise self.fail(
                f"{self.path} is in the way: a folder that is not a worktree of {self.top}"
            )

    def exclude(self) -> None:
        """Add `/.relay/worktrees/` to the repository's info/exclude (once)."""
        where = self.check(self.git("rev-parse", "--git-path", "info/exclude")).stdout.strip()
        exclude = self.top / where
        try:
            text = exclude.read_text(encoding="utf-8", errors="replace") if exclude.exists() else ""
            if EXCLUDE_LINE in (line.strip() for line in text.splitlines()):
                return
            exclude.parent.mkdir(parents=True, exist_ok=True)
            with exclude.open("a", encoding="utf-8") as stream:
                lead = "" if not text or text.endswith("\n") else "\n"
                stream.write(f"{lead}# agents' worktrees (relay up)\n{EXCLUDE_LINE}\n")
        except OSError as exc:
            raise self.fail(
                f"cannot add {EXCLUDE_LINE} to {exclude}: {exc.strerror or exc}"
            ) from None

    def add(self, head: str, *, branch_exists: bool) -> None:
        made = [
            folder
            for folder in (self.top / ".relay", self.top / WORKTREES_FOLDER, self.path)
            if not os.path.lexists(folder)
        ]
        if branch_exists:
            args = ["worktree", "add", str(self.path), self.branch]
        else:
            args = ["worktree", "add", "-b", self.branch, str(self.path), head]
        added = self.git(*args, timeout=GIT_CHECKOUT_TIMEOUT)
        if added.ok:
            return
        self.undo(made, branch_made=not branch_exists)
        raise self.fail(added.reason())

    def undo(self, made: list[Path], *, branch_made: bool) -> None:
        """Take back what a failed `git worktree add` left: its registration, its folder,
        the branch it made and the folders above it that it created."""
        if self.find(self.worktrees_or_none()) is not None:
            self.git("worktree", "remove", "--force", "--force", str(self.path))
        if self.path in made and os.path.lexists(self.path):
            shutil.rmtree(self.path, ignore_errors=True)
        self.git("worktree", "prune")
        if branch_made and self.git("rev-parse", "--verify", "--quiet", self.ref).ok:
            self.git("branch", "-D", self.branch)
        for folder in reversed(made):
            # gone already, or not empty: something else lives there now
            with contextlib.suppress(OSError):
                folder.rmdir()

    def worktrees_or_none(self) -> list[_Worktree]:
        try:
            return self.worktrees()
        except WorktreeError:
            return []

    def check(self, result: GitResult) -> GitResult:
        if not result.ok:
            raise self.fail(result.reason())
        return result
