"""Read and check a team file (`relay.team.toml`) into a `Team` (DESIGN §13, spec/fleet.md).

The file is validated like settings (relay/config/loader.py): every error of the file is
collected, each with the file, line and column and the field's path
(`agent[2].restart.policy`), unknown keys with a did-you-mean, and all of them raised at
once in one TeamFileError. tomllib gives no positions, so `TomlPositions` finds them in the
text of a file tomllib has accepted.

Hostile files cost little and never crash or hang: the file is opened without blocking and
read only when it is a regular file of at most 1 MiB (a FIFO or /dev/zero named
relay.team.toml is refused), at most 1000 agents, nesting too deep for tomllib is an
error, and so is text that is not UTF-8. A symbolic link is followed wherever it points
(the user names the file they run); relative paths in it are read from the link's folder.
"""

from __future__ import annotations

import bisect
import contextlib
import datetime
import math
import os
import re
import shlex
import shutil
import stat
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgspec

from relay.config.loader import render_path
from relay.config.paths import find_project_root
from relay.errors import RelayError, SettingsError, did_you_mean
from relay.fleet.model import TEAM_FILE_NAME, AgentSpec, Restart, Team
from relay.fleet.worktrees import worktree_problem
from relay.services.messaging.model import check_name
from relay.session.voices import STYLES

Segment = str | int
FieldPath = tuple[Segment, ...]
"""Where a value sits in a team file: keys and array indexes from the top."""

MAX_TEAM_FILE_BYTES = 1024 * 1024
"""A larger team file is refused unread."""
MAX_AGENTS = 1000
"""At most this many agents in one team file."""
MAX_SECONDS = 86400.0
"""The longest back-off or healthy time a restart policy may give (a day)."""
MAX_RESTART_LIMIT = 1_000_000
MAX_ERRORS_SHOWN = 50
"""A TeamFileError's text lists at most this many errors (it keeps them all)."""

TOP_KEYS = ("team", "defaults", "agent")
DEFAULTS_KEYS = ("restart", "env", "style")
AGENT_KEYS = (
    "name",
    "command",
    "cwd",
    "worktree",
    "task",
    "env",
    "style",
    "restart",
    "machine",
)
RESTART_KEYS = ("policy", "backoff", "max_backoff", "limit", "healthy")
RESTART_POLICIES = ("never", "on-failure", "always")
KNOWN_HOSTS = ("claude", "gemini", "codex")
"""Programs a misspelt command is compared with for a did-you-mean."""

_NO_SHELL = "; no shell runs the command: ~ and $VARIABLES are not expanded"
_MACHINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_TOML_POSITION = re.compile(r" \(at (?:line (\d+), column (\d+)|end of document)\)$")


class TeamFileError(SettingsError):
    """A team file that cannot be used: every error found in it, in `errors` (in the order
    of the file); its own file, path, line and column are the first error's."""

    def __init__(self, errors: list[SettingsError]) -> None:
        first = errors[0]
        super().__init__(
            first.message, file=first.file, path=first.path, line=first.line, column=first.column
        )
        self.errors = errors

    def __str__(self) -> str:
        if len(self.errors) == 1:
            return str(self.errors[0])
        lines = [f"{len(self.errors)} errors in the team file {self.file}:"]
        lines += [f"  {error}" for error in self.errors[:MAX_ERRORS_SHOWN]]
        if len(self.errors) > MAX_ERRORS_SHOWN:
            lines.append(f"  and {len(self.errors) - MAX_ERRORS_SHOWN} more")
        return "\n".join(lines)


def find_team_file(start: Path) -> Path | None:
    """`relay.team.toml` at the project root of `start` (relay/config/paths.py
    find_project_root), or in `start` itself when it is in no project; None when there
    is no such file there."""
    root = find_project_root(start) or Path(os.path.abspath(start))
    candidate = root / TEAM_FILE_NAME
    # A dangling link or a folder of that name is returned: load_team says what is wrong.
    return candidate if os.path.lexists(candidate) else None


def load_team(path: Path, *, check_programs: bool = True, machine: str | None = None) -> Team:
    """Read and check a team file; raise TeamFileError listing all its errors.

    `check_programs=False` skips what is checked on this machine's disk (each program is
    found, each `cwd` exists, `worktree = true` is in a git repository with a commit), so
    `relay down` and `relay ps` read a file whose agents run elsewhere or no longer could.
    `machine`: the label of this machine; those disk checks then cover only the agents it
    runs (no `machine`, or this one). None: every agent's.
    """
    file = str(path)
    try:
        data = read_team_bytes(path)
        text = decode_team_text(data, file=file)
        document = parse_toml(text, file=file)
    except SettingsError as exc:
        raise TeamFileError([exc]) from None
    root = os.path.dirname(os.path.abspath(path))
    checker = _TeamChecker(
        text, file=file, root=root, check_programs=check_programs, machine=machine
    )
    team = checker.team(document, os.path.abspath(path))
    if checker.errors:
        raise TeamFileError(checker.sorted_errors())
    assert team is not None  # no error: the team was built
    return team


def read_team_bytes(path: Path) -> bytes:
    """The bytes of a team file; raise SettingsError when it is not a regular file that
    can be read or is larger than MAX_TEAM_FILE_BYTES."""
    file = str(path)
    try:
        # O_NONBLOCK: a FIFO named relay.team.toml must not block relay in open().
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SettingsError(
            f"cannot read the team file: {exc.strerror or exc}", file=file
        ) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise SettingsError("is a folder, not a team file", file=file)
        if not stat.S_ISREG(info.st_mode):
            raise SettingsError(
                "is not a regular file (a FIFO, socket or device); not read", file=file
            )
        data = b""
        if info.st_size <= MAX_TEAM_FILE_BYTES:
            data = _read_at_most(fd, MAX_TEAM_FILE_BYTES + 1)
        if info.st_size > MAX_TEAM_FILE_BYTES or len(data) > MAX_TEAM_FILE_BYTES:
            limit = MAX_TEAM_FILE_BYTES // (1024 * 1024)
            raise SettingsError(f"team file is larger than {limit} MiB; not read", file=file)
        return data
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SettingsError(f"cannot read the team file: {reason}", file=file) from None
    finally:
        os.close(fd)


def _read_at_most(fd: int, size: int) -> bytes:
    """Up to `size` bytes of a regular file (a file that grows while read stops there)."""
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def decode_team_text(data: bytes, *, file: str) -> str:
    """The bytes as UTF-8 text without a byte-order mark; raise SettingsError with the line
    and column of the first byte that is not UTF-8."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        column = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", "replace")) + 1
        raise SettingsError("not valid UTF-8", file=file, line=line, column=column) from None


def parse_toml(text: str, *, file: str) -> dict[str, Any]:
    """The TOML document; raise SettingsError with tomllib's line and column."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = _TOML_POSITION.search(message)
        line: int | None = None
        column: int | None = None
        if found is not None:
            message = message[: found.start()]
            if found.group(1) is not None:
                line, column = int(found.group(1)), int(found.group(2))
            else:  # at end of document: just past its last character
                line = text.count("\n") + 1
                column = len(text) - (text.rfind("\n") + 1) + 1
        reason = message[:1].lower() + message[1:]
        raise SettingsError(
            f"invalid TOML: {reason}", file=file, line=line, column=column
        ) from None
    except RecursionError:
        raise SettingsError("invalid TOML: nested too deeply", file=file) from None


def toml_type(value: Any) -> str:
    """The TOML name of a decoded value's type, for messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, datetime.datetime):
        return "date-time"
    if isinstance(value, datetime.date):
        return "date"
    if isinstance(value, datetime.time):
        return "time"
    if isinstance(value, list):
        return "array"
    return "table"


# -- the checks ------------------------------------------------------------------------


class _Invalid(Exception):
    """A value had an error (already recorded): what holds it is not built."""


class _TeamChecker:
    """Walks a decoded team file, recording every error with its path and position."""

    def __init__(
        self,
        text: str,
        *,
        file: str,
        root: str,
        check_programs: bool,
        machine: str | None,
    ) -> None:
        self.file = file
        self.root = root
        self.check_programs = check_programs
        self.machine = machine
        self.positions = TomlPositions(text)
        self.errors: list[SettingsError] = []
        self._worktree_answer: list[str | None] = []
        """Why worktrees cannot be made here (None: they can), once asked."""

    # recording

    def error(self, path: FieldPath, message: str) -> None:
        line, column = self.positions.locate(path) or (None, None)
        self.errors.append(
            SettingsError(
                message, file=self.file, path=render_path(path) or None, line=line, column=column
            )
        )

    def fail(self, path: FieldPath, message: str) -> _Invalid:
        self.error(path, message)
        return _Invalid()

    def sorted_errors(self) -> list[SettingsError]:
        return sorted(self.errors, key=lambda error: (error.line or 0, error.column or 0))

    # typed values

    def string(self, value: Any, path: FieldPath, *, blank: bool = False) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {toml_type(value)}")
        if "\x00" in value:
            raise self.fail(path, "contains a NUL character")
        if not blank and not value.strip():
            raise self.fail(path, "is empty")
        return value

    def boolean(self, value: Any, path: FieldPath) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"expected true or false, got {toml_type(value)}")
        return value

    def table(self, value: Any, path: FieldPath) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a table, got {toml_type(value)}")
        return value

    def choice(self, value: Any, path: FieldPath, choices: tuple[str, ...]) -> str:
        text = self.string(value, path, blank=True)
        if text not in choices:
            raise self.fail(
                path,
                f"expected one of {', '.join(choices)}, got {text!r}{did_you_mean(text, choices)}",
            )
        return text

    def seconds(self, value: Any, path: FieldPath) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(path, f"expected a number of seconds, got {toml_type(value)}")
        if not math.isfinite(value) or value < 0:
            raise self.fail(path, f"expected a number of seconds from 0, got {value}")
        if value > MAX_SECONDS:
            raise self.fail(path, f"expected at most {MAX_SECONDS:g} seconds (a day), got {value}")
        return float(value)

    def unknown_keys(
        self, table: dict[str, Any], path: FieldPath, known: tuple[str, ...], where: str
    ) -> None:
        for key in table:
            if key in known:
                continue
            message = f"unknown key {key!r} in {where}{did_you_mean(key, known)}"
            if where == "the team file" and key in AGENT_KEYS:
                message += "; an agent's keys go in an [[agent]] table"
            elif where == "[defaults]" and key in AGENT_KEYS:
                message += f"; [defaults] gives only {', '.join(DEFAULTS_KEYS)} to every agent"
            self.error((*path, key), message)

    # the file

    def team(self, document: dict[str, Any], file: str) -> Team | None:
        self.unknown_keys(document, (), TOP_KEYS, "the team file")
        name = ""
        if "team" in document:
            # its error is recorded; the agents are still checked
            with contextlib.suppress(_Invalid):
                name = self.name(document["team"], ("team",), what="team name")
        defaults = self.defaults(document.get("defaults", {}))
        agents = self.agents(document, defaults or _Defaults())
        if self.errors:
            return None
        return Team(name=name, file=file, root=self.root, agents=agents)

    def name(self, value: Any, path: FieldPath, *, what: str) -> str:
        text = self.string(value, path, blank=True)
        try:
            return check_name(text, what=what)
        except RelayError as exc:
            raise self.fail(path, str(exc)) from None

    def defaults(self, value: Any) -> _Defaults | None:
        path: FieldPath = ("defaults",)
        try:
            table = self.table(value, path)
        except _Invalid:
            return None
        self.unknown_keys(table, path, DEFAULTS_KEYS, "[defaults]")
        defaults = _Defaults()
        errors_before = len(self.errors)
        for key, convert in (
            ("restart", lambda v, p: self.restart(v, p, Restart())),
            ("env", self.env),
            ("style", lambda v, p: self.choice(v, p, STYLES)),
        ):
            if key in table:
                # its error is recorded
                with contextlib.suppress(_Invalid):
                    setattr(defaults, key, convert(table[key], (*path, key)))
        return defaults if len(self.errors) == errors_before else None

    def agents(self, document: dict[str, Any], defaults: _Defaults) -> list[AgentSpec]:
        path: FieldPath = ("agent",)
        value = document.get("agent", [])
        if not isinstance(value, list):
            self.error(
                path, f"expected [[agent]] tables (an array of tables), got {toml_type(value)}"
            )
            return []
        if not value:
            self.error(
                path, "the team has no agents: add an [[agent]] table with a name and a command"
            )
            return []
        if len(value) > MAX_AGENTS:
            self.error(path, f"too many agents: {len(value)} (the limit is {MAX_AGENTS})")
            return []
        specs: list[AgentSpec] = []
        seen: dict[str, int] = {}  # lower-cased name -> the first agent's index
        for index, item in enumerate(value):
            spec = self.agent(item, (*path, index), defaults)
            agent_name = _usable_name(item)
            if agent_name is not None:
                first = seen.setdefault(agent_name.lower(), index)
                if first != index:
                    self.duplicate(value, first, index)
            if spec is not None:
                specs.append(spec)
        return specs

    def duplicate(self, agents: list[Any], first: int, second: int) -> None:
        path: FieldPath = ("agent", second, "name")
        first_name, second_name = agents[first]["name"], agents[second]["name"]
        first_line = (self.positions.locate(("agent", first, "name")) or (None, None))[0]
        second_line = (self.positions.locate(path) or (None, None))[0]
        if first_name == second_name:
            message = (
                f"agent name {second_name!r} is used twice: at lines {first_line} and {second_line}"
            )
        else:
            message = (
                f"agent names {first_name!r} and {second_name!r} differ only in case (lines "
                f"{first_line} and {second_line}): their worktrees and branches would collide"
            )
        self.error(path, message)

    def agent(self, value: Any, path: FieldPath, defaults: _Defaults) -> AgentSpec | None:
        try:
            table = self.table(value, path)
        except _Invalid:
            return None
        self.unknown_keys(table, path, AGENT_KEYS, "an agent")
        errors_before = len(self.errors)
        fields: dict[str, Any] = {}
        for key in ("name", "command"):
            if key not in table:
                self.error(path, f"missing required key {key!r}")
        for key, convert in (
            ("name", lambda v, p: self.name(v, p, what="agent name")),
            ("command", self.command),
            ("cwd", self.string),
            ("worktree", self.boolean),
            ("task", self.string),
            ("env", self.env),
            ("style", lambda v, p: self.choice(v, p, STYLES)),
            ("restart", lambda v, p: self.restart(v, p, defaults.restart)),
            ("machine", self.machine_label),
        ):
            if key in table:
                # its error is recorded; the other keys are still checked
                with contextlib.suppress(_Invalid):
                    fields[key] = convert(table[key], (*path, key))
        fields["env"] = {**defaults.env, **fields.get("env", {})}
        self.check_place(fields, table, path)
        if len(self.errors) > errors_before:
            return None
        fields.setdefault("style", defaults.style)
        fields.setdefault("restart", defaults.restart)
        line = (self.positions.locate(path) or (None, None))[0]
        return AgentSpec(line=line, **fields)

    def check_place(self, fields: dict[str, Any], table: dict[str, Any], path: FieldPath) -> None:
        """Check where the agent runs and what: its cwd, worktree and program (on this
        machine's disk only when `check_programs` and this machine runs it)."""
        machine = fields.get("machine")
        on_disk = self.check_programs and (self.machine is None or machine in (None, self.machine))
        folder: str | None = self.root
        if fields.get("worktree") and "cwd" in table:
            self.error(
                (*path, "cwd"),
                "cwd conflicts with worktree = true: a worktree agent works in its own "
                "worktree; drop one of them",
            )
        elif "cwd" in fields:
            folder = self.cwd(fields["cwd"], (*path, "cwd"), on_disk=on_disk)
        if not on_disk:
            return
        if fields.get("worktree"):
            problem = self.worktrees_problem()
            if problem is not None:
                self.error((*path, "worktree"), f"worktree = true cannot be used: {problem}")
        if "command" in fields and folder is not None:
            problem = program_problem(fields["command"][0], folder, fields["env"].get("PATH"))
            if problem is not None:
                command = table["command"]
                where = (*path, "command", 0) if isinstance(command, list) else (*path, "command")
                name = fields.get("name")
                self.error(where, f"agent {name!r}: {problem}" if name else problem)

    def command(self, value: Any, path: FieldPath) -> list[str]:
        if isinstance(value, str):
            text = self.string(value, path, blank=True)
            try:
                words = shlex.split(text)
            except ValueError as exc:
                raise self.fail(path, f"cannot split the command: {str(exc).lower()}") from None
        elif isinstance(value, list):
            words = []
            for index, item in enumerate(value):
                # its error is recorded
                with contextlib.suppress(_Invalid):
                    words.append(self.string(item, (*path, index), blank=True))
            if len(words) < len(value):
                raise _Invalid()
        else:
            raise self.fail(
                path, f"expected a string or an array of strings, got {toml_type(value)}"
            )
        if not words or not words[0].strip():
            raise self.fail(path, "the command is empty: give the program to run")
        return words

    def env(self, value: Any, path: FieldPath) -> dict[str, str]:
        table = self.table(value, path)
        env: dict[str, str] = {}
        invalid = False
        for key, item in table.items():
            where = (*path, key)
            if not key or "=" in key or "\x00" in key:
                self.error(where, f"{key!r} is not a usable environment variable name")
                invalid = True
            elif isinstance(item, str) and "\x00" not in item:
                env[key] = item
            elif isinstance(item, str):
                self.error(where, "contains a NUL character")
                invalid = True
            else:
                hint = " (quote it: environment values are strings)"
                self.error(where, f"expected a string, got {toml_type(item)}" + hint)
                invalid = True
        if invalid:
            raise _Invalid()
        return env

    def restart(self, value: Any, path: FieldPath, base: Restart) -> Restart:
        if isinstance(value, str):
            return _replace(base, policy=self.choice(value, path, RESTART_POLICIES))
        if not isinstance(value, dict):
            raise self.fail(
                path,
                f"expected a policy ({', '.join(RESTART_POLICIES)}) or a table, got "
                f"{toml_type(value)}",
            )
        self.unknown_keys(value, path, RESTART_KEYS, "a restart table")
        errors_before = len(self.errors)
        given: dict[str, Any] = {}
        for key in RESTART_KEYS:
            if key not in value:
                continue
            item, where = value[key], (*path, key)
            # its error is recorded
            with contextlib.suppress(_Invalid):
                if key == "policy":
                    given[key] = self.choice(item, where, RESTART_POLICIES)
                elif key == "limit":
                    given[key] = self.limit(item, where)
                else:
                    given[key] = self.seconds(item, where)
        if len(self.errors) > errors_before:
            raise _Invalid()
        restart = _replace(base, **given)
        if restart.max_backoff < restart.backoff:
            where = (*path, "max_backoff" if "max_backoff" in value else "backoff")
            raise self.fail(
                where,
                f"max_backoff ({restart.max_backoff:g}) is less than backoff ({restart.backoff:g})",
            )
        if restart.healthy <= 0:
            raise self.fail((*path, "healthy"), "expected a number of seconds above 0, got 0")
        return restart

    def limit(self, value: Any, path: FieldPath) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {toml_type(value)}")
        if not 0 <= value <= MAX_RESTART_LIMIT:
            raise self.fail(
                path, f"expected a number of restarts from 0 to {MAX_RESTART_LIMIT}, got {value}"
            )
        return value

    def machine_label(self, value: Any, path: FieldPath) -> str:
        text = self.string(value, path, blank=True)
        if not _MACHINE.match(text):
            raise self.fail(
                path,
                f"machine label {text!r} is not usable: 1 to 128 letters, digits, '.', '_' or "
                "'-', starting with a letter or digit",
            )
        return text

    # this machine's disk

    def cwd(self, cwd: str, path: FieldPath, *, on_disk: bool) -> str | None:
        """The absolute working folder, or None with an error recorded. Without `on_disk`,
        only whether it is written inside the team's folder."""
        folder = os.path.normpath(os.path.join(self.root, cwd))
        if not _inside(folder, self.root):
            self.error(path, f"cwd {cwd!r} is outside the team's folder {self.root}")
            return None
        if not on_disk:
            return folder
        if not os.path.exists(folder):
            self.error(path, f"cwd {cwd!r} does not exist ({folder})")
            return None
        if not os.path.isdir(folder):
            self.error(path, f"cwd {cwd!r} is not a folder ({folder})")
            return None
        if not _inside(os.path.realpath(folder), os.path.realpath(self.root)):
            self.error(
                path,
                f"cwd {cwd!r} leads outside the team's folder {self.root} through a symbolic link",
            )
            return None
        return folder

    def worktrees_problem(self) -> str | None:
        if not self._worktree_answer:
            self._worktree_answer.append(worktree_problem(Path(self.root)))
        return self._worktree_answer[0]


class _Defaults:
    """What `[defaults]` gives every agent."""

    def __init__(self) -> None:
        self.restart = Restart()
        self.env: dict[str, str] = {}
        self.style: str | None = None


def _replace(restart: Restart, **changes: Any) -> Restart:
    return msgspec.structs.replace(restart, **changes)


def _usable_name(agent: Any) -> str | None:
    """The agent's name when it is one relay's messaging accepts, else None."""
    name = agent.get("name") if isinstance(agent, dict) else None
    if not isinstance(name, str):
        return None
    try:
        return check_name(name)
    except RelayError:
        return None


def _inside(folder: str, root: str) -> bool:
    return folder == root or folder.startswith(root.rstrip(os.sep) + os.sep)


def program_problem(program: str, folder: str, search_path: str | None = None) -> str | None:
    """Why `program` cannot be run from `folder` (not found on PATH, or a path that is
    missing, a folder or not executable), or None when it can."""
    if "/" in program:
        candidate = os.path.normpath(os.path.join(folder, program))
        if not os.path.exists(candidate):
            hint = _NO_SHELL if program.startswith(("~", "$")) else ""
            return f"program {program!r} not found ({candidate} does not exist){hint}"
        if os.path.isdir(candidate):
            return f"program {program!r} is a folder ({candidate})"
        if not os.access(candidate, os.X_OK):
            return f"program {program!r} is not executable ({candidate})"
        return None
    if shutil.which(program, path=search_path) is None:
        hosts = [host for host in KNOWN_HOSTS if host != program]
        where = "the agent's PATH" if search_path is not None else "PATH"
        hint = _NO_SHELL if program.startswith("$") else did_you_mean(program, hosts)
        return f"program {program!r} not found on {where}{hint}"
    return None


# -- positions in TOML text ------------------------------------------------------------


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_BASIC_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"', re.DOTALL)
_LITERAL_STRING = re.compile(r"'[^'\n]*'")
_MULTILINE_BASIC = re.compile(r'"""(?:[^"\\]|\\.|"(?!""))*""""{0,2}', re.DOTALL)
_MULTILINE_LITERAL = re.compile(r"'''(?:[^']|'(?!''))*''''{0,2}")
_BARE_VALUE = re.compile(r"[^\s,\[\]{}#]+")
_DATE_THEN_TIME = re.compile(r"\d{4}-\d\d-\d\d(?= \d\d:)")
_BLANK = re.compile(r"(?:[ \t\r\n]|#[^\n]*)*")
_SPACES = re.compile(r"[ \t]*")


class TomlPositions:
    """Line and column of the keys, tables and array elements of a TOML text that tomllib
    has accepted, by field path."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._offsets: dict[FieldPath, int] | None = None
        self._newlines: list[int] = []

    def locate(self, path: Iterable[Segment]) -> tuple[int, int] | None:
        """1-based line and column of what names `path` first (a key; an `[[agent]]`
        header for an element of an array of tables; the value for an element of an
        array), or of its nearest ancestor found; None when none is."""
        if self._offsets is None:
            # Built on first use: a file without an error needs only its agents' lines.
            self._offsets = scan_toml(self._text)
            self._newlines = [match.start() for match in re.finditer("\n", self._text)]
        path = tuple(path)
        for depth in range(len(path), -1, -1):
            offset = self._offsets.get(path[:depth])
            if offset is not None:
                line = bisect.bisect_left(self._newlines, offset)
                line_start = self._newlines[line - 1] + 1 if line else 0
                return line + 1, offset - line_start + 1
        return None


def scan_toml(text: str) -> dict[FieldPath, int]:
    """The offset of what first names each path in a TOML text tomllib accepted."""
    scanner = _TomlScanner(text)
    try:
        return scanner.scan()
    except (_ScanError, IndexError):
        # A form this scanner does not know: the paths found so far still hold, and an
        # error about a later one names its nearest ancestor found, or no line.
        return scanner.offsets


class _ScanError(Exception):
    """The text is not TOML the scanner can follow."""


class _TomlScanner:
    """One pass over valid TOML: headers, keys, and values (arrays and inline tables
    with an explicit stack, so deep nesting cannot overflow Python's)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.offsets: dict[FieldPath, int] = {}
        self.table: FieldPath = ()
        self.array_lengths: dict[FieldPath, int] = {}
        """Elements seen so far of each array of tables, by its path."""

    def scan(self) -> dict[FieldPath, int]:
        text = self.text
        while True:
            self.skip(_BLANK)
            if self.pos >= len(text):
                return self.offsets
            if text.startswith("[[", self.pos):
                self.header(array=True)
            elif text[self.pos] == "[":
                self.header(array=False)
            else:
                self.key_value(self.table)

    def skip(self, pattern: re.Pattern[str]) -> None:
        match = pattern.match(self.text, self.pos)
        if match is not None:
            self.pos = match.end()

    def note(self, path: FieldPath, offset: int) -> None:
        self.offsets.setdefault(path, offset)

    def key(self) -> list[tuple[str, int]]:
        """A dotted key's parts and where each starts."""
        parts: list[tuple[str, int]] = []
        while True:
            self.skip(_SPACES)
            start = self.pos
            char = self.text[start]
            if char == '"':
                match = _expect(_BASIC_STRING.match(self.text, start))
                part = match.group()[1:-1]
                if "\\" in part:  # escapes: decoded as tomllib does
                    part = tomllib.loads("k = " + match.group())["k"]
            elif char == "'":
                match = _expect(_LITERAL_STRING.match(self.text, start))
                part = match.group()[1:-1]
            else:
                match = _expect(_BARE_KEY.match(self.text, start))
                part = match.group()
            self.pos = match.end()
            parts.append((part, start))
            self.skip(_SPACES)
            if not self.text.startswith(".", self.pos):
                return parts
            self.pos += 1

    def header(self, *, array: bool) -> None:
        start = self.pos
        self.pos += 2 if array else 1
        parts = self.key()
        self.skip(_SPACES)
        self.pos += 2 if array else 1  # the closing bracket(s)
        path: list[Segment] = []
        for index, (part, offset) in enumerate(parts):
            path.append(part)
            here = tuple(path)
            self.note(here, offset)
            if array and index == len(parts) - 1:
                count = self.array_lengths.get(here, 0)
                self.array_lengths[here] = count + 1
                path.append(count)
                self.note(tuple(path), start)
            elif here in self.array_lengths:
                path.append(self.array_lengths[here] - 1)  # its latest table
        self.table = tuple(path)

    def key_value(self, table: FieldPath) -> FieldPath:
        parts = self.key()
        path = table
        for part, offset in parts:
            path = (*path, part)
            self.note(path, offset)
        self.skip(_SPACES)
        self.pos += 1  # =
        self.value(path)
        return path

    def value(self, path: FieldPath) -> None:
        # Each open array is [path, next index]; each open inline table is [path, None].
        stack: list[list[Any]] = []
        pending: FieldPath | None = path
        while True:
            if pending is not None:
                self.skip(_BLANK)
                self.note(pending, self.pos)
                char = self.text[self.pos]
                if char == "[":
                    stack.append([pending, 0])
                    self.pos += 1
                elif char == "{":
                    stack.append([pending, None])
                    self.pos += 1
                else:
                    self.scalar()
                pending = None
            if not stack:
                return
            self.skip(_BLANK)
            char = self.text[self.pos]
            top = stack[-1]
            if char in "]}":
                self.pos += 1
                stack.pop()
            elif char == ",":
                self.pos += 1
            elif top[1] is not None:  # an array's next element
                pending = (*top[0], top[1])
                top[1] += 1
            else:  # an inline table's next key
                parts = self.key()
                pending = top[0]
                for part, offset in parts:
                    pending = (*pending, part)
                    self.note(pending, offset)
                self.skip(_SPACES)
                self.pos += 1  # =

    def scalar(self) -> None:
        text, start = self.text, self.pos
        if text.startswith('"""', start):
            match = _MULTILINE_BASIC.match(text, start)
        elif text.startswith("'''", start):
            match = _MULTILINE_LITERAL.match(text, start)
        elif text[start] == '"':
            match = _BASIC_STRING.match(text, start)
        elif text[start] == "'":
            match = _LITERAL_STRING.match(text, start)
        else:
            date = _DATE_THEN_TIME.match(text, start)
            if date is not None:  # `1979-05-27 07:32:00`: a space inside one value
                self.pos = date.end() + 1
            match = _BARE_VALUE.match(text, self.pos)
        self.pos = _expect(match).end()


def _expect(match: re.Match[str] | None) -> re.Match[str]:
    if match is None:
        raise _ScanError()
    return match
