"""The team file: read, checked with file:line:column errors, and its TOML positions."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.errors import SettingsError
from relay.fleet.model import TEAM_FILE_NAME, AgentSpec, Restart, Team
from relay.fleet.teamfile import (
    MAX_AGENTS,
    MAX_TEAM_FILE_BYTES,
    TeamFileError,
    TomlPositions,
    find_team_file,
    load_team,
    scan_toml,
)

# -- a TOML writer that knows where it put every key -------------------------------------


@dataclass
class Scalar:
    text: str


@dataclass
class Array:
    items: list[Any]


@dataclass
class Table:
    entries: dict[str, Any]


@dataclass
class TableArray:
    tables: list[Table]


SCALARS = [
    "1",
    "-17",
    "+99",
    "1_000",
    "0xDEAD_beef",
    "0o755",
    "0b1101",
    "3.1415",
    "-0.01",
    "5e+22",
    "inf",
    "-inf",
    "nan",
    "true",
    "false",
    "1979-05-27T07:32:00Z",
    "1979-05-27T00:32:00.999999-07:00",
    "1979-05-27 07:32:00",
    "1979-05-27",
    "07:32:00",
    '"plain"',
    r'"a \" quote, # hash, ] bracket, } brace, = sign"',
    "'literal \" # ] } , ='",
    '""',
    "''",
    '"""\nmulti "" line # not a comment\n]"""',
    '"""ends with quotes"""""',
    '"""a \\\n   b"""',
    "'''\nraw '' line [x]\n'''",
    "'''ends'''''",
    r'"\u00e9\t\\"',
]
KEY_ALPHABET = st.sampled_from(list("abcXY09_- .\"'#=[]{}é\\\t,"))
KEYS = st.one_of(
    st.from_regex(r"[A-Za-z0-9_-]{1,6}", fullmatch=True),
    st.text(KEY_ALPHABET, max_size=5),
)
LEAF = st.builds(Scalar, st.sampled_from(SCALARS))


def _tables(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Table]:
    return st.builds(Table, st.dictionaries(KEYS, children, max_size=3))


NODES = st.recursive(
    LEAF,
    lambda children: st.one_of(
        st.builds(Array, st.lists(children, max_size=3)),
        _tables(children),
        st.builds(TableArray, st.lists(_tables(children), min_size=1, max_size=3)),
    ),
    max_leaves=16,
)
DOCUMENTS = st.dictionaries(KEYS, NODES, max_size=5)


Part = tuple[str, tuple[Any, ...]]
"""One key of a dotted key or header, and the path it names."""


class Writer:
    """Writes a document as TOML in forms chosen at random (sections or inline tables,
    dotted keys, headers left implicit, quoted keys, comments, blank lines, CRLF), noting
    the offset of what first names each path, as TomlPositions promises to find it.

    The forms come from a Random that hypothesis seeds (st.randoms): drawing each of an
    example's hundred-odd choices through hypothesis cost over a third of its time."""

    def __init__(self, chooser: random.Random) -> None:
        self.chooser = chooser
        self.parts: list[str] = []
        self.size = 0
        self.expected: dict[tuple[Any, ...], int] = {}

    def text(self) -> str:
        return "".join(self.parts)

    def write(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    def mark(self, path: tuple[Any, ...]) -> None:
        self.expected.setdefault(path, self.size)

    def choose(self, options: list[Any]) -> Any:
        return self.chooser.choice(options)

    def space(self) -> None:
        self.write(self.choose(["", " ", "  ", "\t"]))

    def end_of_line(self) -> None:
        self.write(self.choose(["\n", "\r\n", "  # a comment ] \" ' {\n", "\n\n", "\n# [x]\n"]))

    def key(self, key: str) -> None:
        bare = re.fullmatch(r"[A-Za-z0-9_-]+", key) is not None
        literal = "'" not in key and not any(ord(char) < 0x20 for char in key)
        forms = (["bare"] if bare else []) + ["basic"] + (["literal"] if literal else [])
        form = self.choose(forms)
        if form == "bare":
            self.write(key)
        elif form == "literal":
            self.write(f"'{key}'")
        else:
            escaped = "".join(
                "\\" + char
                if char in '"\\'
                else f"\\u{ord(char):04x}"
                if ord(char) < 0x20
                else char
                for char in key
            )
            self.write(f'"{escaped}"')

    def dotted(self, parts: list[Part]) -> None:
        for index, (key, path) in enumerate(parts):
            if index:
                self.space()
                self.write(".")
                self.space()
            self.mark(path)
            self.key(key)

    def document(self, document: dict[str, Any]) -> str:
        self.body((), [], document, "root")
        return self.text()

    def body(
        self, path: tuple[Any, ...], header: list[Part], entries: dict[str, Any], kind: str
    ) -> None:
        """A table: its header (an implicit table's may be left out), its key/values, then
        its sub-tables as sections."""
        inline, sections = [], []
        for key, value in entries.items():
            if isinstance(value, Table | TableArray) and self.choose([True, False]):
                sections.append((key, value))
            else:
                inline.append((key, value))
        if kind == "element":
            self.header(header, array=True, element=path)
        elif kind == "table" and (inline or not sections or self.choose([True, False])):
            self.header(header, array=False)
        for key, value in inline:
            self.write(self.choose(["", "  "]))
            self.key_value([(key, (*path, key))], value)
            self.end_of_line()
        for key, value in sections:
            here = (*path, key)
            if isinstance(value, Table):
                self.body(here, [*header, (key, here)], value.entries, "table")
            else:
                for index, table in enumerate(value.tables):
                    element = (*here, index)
                    self.body(element, [*header, (key, element)], table.entries, "element")

    def header(self, parts: list[Part], *, array: bool, element: tuple[Any, ...] = ()) -> None:
        self.write(self.choose(["", " "]))
        if array:
            self.mark(element)
        self.write("[[" if array else "[")
        self.space()
        # A header names arrays by their keys (an element's path is marked at its `[[`).
        self.dotted(
            [(key, path[:-1] if isinstance(path[-1], int) else path) for key, path in parts]
        )
        self.space()
        self.write("]]" if array else "]")
        self.end_of_line()

    def key_value(self, parts: list[Part], value: Any) -> None:
        path = parts[-1][1]
        if isinstance(value, Table) and value.entries and self.choose([True, False]):
            for index, (key, item) in enumerate(value.entries.items()):
                if index:
                    self.write(", " if self.in_inline else "")
                    if not self.in_inline:
                        self.end_of_line()
                self.key_value([*parts, (key, (*path, key))], item)
            return
        self.dotted(parts)
        self.space()
        self.write("=")
        self.space()
        self.value(path, value)

    in_inline = False

    def value(self, path: tuple[Any, ...], value: Any) -> None:
        self.mark(path)
        if isinstance(value, Scalar):
            self.write(value.text)
        elif isinstance(value, Array | TableArray):
            items = value.items if isinstance(value, Array) else value.tables
            self.write("[")
            for index, item in enumerate(items):
                self.write(self.choose(["", " ", "\n  ", "\n  # c ] ,\n  "]))
                self.value((*path, index), item)
                if index < len(items) - 1 or self.choose([True, False]):
                    self.write(",")
            self.write(self.choose(["", " ", "\n"]))
            self.write("]")
        else:
            outer = self.in_inline
            self.in_inline = True
            self.write("{")
            self.space()
            for index, (key, item) in enumerate(value.entries.items()):
                if index:
                    self.write(",")
                    self.space()
                self.key_value([(key, (*path, key))], item)
            self.space()
            self.write("}")
            self.in_inline = outer


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENTS, st.randoms(use_true_random=True))
def test_positions_of_every_key_table_and_element(
    document: dict[str, Any], chooser: random.Random
) -> None:
    writer = Writer(chooser)
    text = writer.document(document)
    tomllib.loads(text)  # the writer wrote valid TOML
    assert scan_toml(text) == writer.expected


def test_positions_are_lines_and_columns_in_characters() -> None:
    text = (
        "# a team\r\n"
        'team = "été"\r\n'
        "\r\n"
        "[[agent]]\r\n"
        '  "naïve" = 1\r\n'
        "\tcommand = [\"a\", 'b',\r\n"
        '     "c"]\r\n'
        "[[agent]]\n"
        'restart = { policy = "always", "é".limit = 3 }\n'
    )
    assert tomllib.loads(text)["agent"][1]["restart"]["é"] == {"limit": 3}
    positions = TomlPositions(text)
    assert positions.locate(("team",)) == (2, 1)
    assert positions.locate(("agent",)) == (4, 3)
    assert positions.locate(("agent", 0)) == (4, 1)
    assert positions.locate(("agent", 0, "naïve")) == (5, 3)
    assert positions.locate(("agent", 0, "command", 1)) == (6, 18)
    assert positions.locate(("agent", 0, "command", 2)) == (7, 6)
    assert positions.locate(("agent", 1)) == (8, 1)
    assert positions.locate(("agent", 1, "restart", "policy")) == (9, 13)
    assert positions.locate(("agent", 1, "restart", "é")) == (9, 32)
    assert positions.locate(("agent", 1, "restart", "é", "limit")) == (9, 36)
    # What is not there is placed at its nearest ancestor that is.
    assert positions.locate(("agent", 1, "restart", "backoff")) == (9, 1)
    assert positions.locate(("agent", 7, "name")) == (4, 3)
    assert positions.locate(("defaults", "env")) is None


# -- reading a good file ----------------------------------------------------------------


def write(folder: Path, text: str, name: str = TEAM_FILE_NAME) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def errors(path: Path, **options: Any) -> list[str]:
    """Every error of the team file, as the user reads them."""
    with pytest.raises(TeamFileError) as caught:
        load_team(path, **options)
    return [str(error) for error in caught.value.errors]


def test_a_team_file_read_into_a_team(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    path = write(
        tmp_path,
        """\
team = "builders"

[defaults]
restart = { policy = "always", backoff = 2 }
env = { LEVEL = "1", SHARED = "yes" }
style = "plain"

[[agent]]
name = "alice"
command = "sh -c 'echo \\"hello there\\"'"
task = "write the tests"
env.LEVEL = "2"
restart.limit = 3

[[agent]]
name = "bob"
command = ["sh", "-c", "echo hi"]
cwd = "src"
style = "claude"
restart = "never"
machine = "gpu-box.local"
""",
    )
    team = load_team(path)
    assert team == Team(
        name="builders",
        file=str(path),
        root=str(tmp_path),
        agents=[
            AgentSpec(
                name="alice",
                command=["sh", "-c", 'echo "hello there"'],
                task="write the tests",
                env={"LEVEL": "2", "SHARED": "yes"},
                style="plain",
                restart=Restart(policy="always", backoff=2.0, limit=3),
                line=8,
            ),
            AgentSpec(
                name="bob",
                command=["sh", "-c", "echo hi"],
                cwd="src",
                env={"LEVEL": "1", "SHARED": "yes"},
                style="claude",
                restart=Restart(policy="never", backoff=2.0),
                machine="gpu-box.local",
                line=15,
            ),
        ],
    )


def test_the_least_team_file_and_its_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, 'agent = [{ name = "solo", command = "sh" }]\n')
    team = load_team(path)
    assert team.name == ""  # the repository's team, chosen by `relay up`
    assert team.agents == [AgentSpec(name="solo", command=["sh"], restart=Restart(), line=1)]
    assert team.agents[0].restart == Restart(
        policy="on-failure", backoff=1.0, max_backoff=60.0, limit=5, healthy=60.0
    )


def test_the_team_file_is_found_at_the_project_root(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    deep = project / "src" / "deep"
    deep.mkdir(parents=True)
    assert find_team_file(deep) is None
    path = write(project, 'agent = [{ name = "a", command = "sh" }]\n')
    assert find_team_file(deep) == path
    assert find_team_file(project) == path
    # A nested project (its own .relay/) is a root of its own: the outer file is not its.
    (project / "src" / ".relay").mkdir()
    assert find_team_file(deep) is None
    # A folder in no project: its own file (not one of a folder above it).
    loose = tmp_path / "loose"
    (loose / "below").mkdir(parents=True)
    assert find_team_file(loose) is None
    path = write(loose, 'agent = [{ name = "a", command = "sh" }]\n')
    assert find_team_file(loose) == path
    assert find_team_file(loose / "below") is None


def test_a_dangling_link_is_found_and_then_said_so(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / TEAM_FILE_NAME).symlink_to(project / "gone.toml")
    assert find_team_file(project) == project / TEAM_FILE_NAME
    assert errors(project / TEAM_FILE_NAME) == [
        f"{project / TEAM_FILE_NAME}: cannot read the team file: No such file or directory"
    ]


# -- errors, each with file:line:column and the field's path -------------------------------

AGENT = '[[agent]]\nname = "a"\ncommand = "sh"\n'
"""A good agent, three lines long."""

ERRORS = [
    pytest.param(
        'team = "t"\nagents = []\n' + AGENT,
        ["2:1: agents: unknown key 'agents' in the team file (did you mean 'agent'?)"],
        id="unknown top-level key",
    ),
    pytest.param(
        'name = "a"\ncommand = "sh"\n' + AGENT,
        [
            "1:1: name: unknown key 'name' in the team file; an agent's keys go in an"
            " [[agent]] table",
            "2:1: command: unknown key 'command' in the team file; an agent's keys go in an"
            " [[agent]] table",
        ],
        id="agent keys at the top",
    ),
    pytest.param(
        AGENT + 'comand = "x"\nwork_tree = true\n',
        [
            "4:1: agent[0].comand: unknown key 'comand' in an agent (did you mean 'command'?)",
            "5:1: agent[0].work_tree: unknown key 'work_tree' in an agent (did you mean"
            " 'worktree'?)",
        ],
        id="unknown agent keys",
    ),
    pytest.param(
        '[defaults]\ncommand = "sh"\nrestart = { polcy = "always" }\n' + AGENT,
        [
            "2:1: defaults.command: unknown key 'command' in [defaults]; [defaults] gives"
            " only restart, env, style to every agent",
            "3:13: defaults.restart.polcy: unknown key 'polcy' in a restart table (did you"
            " mean 'policy'?)",
        ],
        id="unknown keys in defaults and restart",
    ),
    pytest.param(
        AGENT + "restart = { max-backoff = 5 }\n",
        [
            "4:13: agent[0].restart.max-backoff: unknown key 'max-backoff' in a restart table"
            " (did you mean 'max_backoff'?)"
        ],
        id="kebab case in restart",
    ),
    pytest.param(
        'team = 5\n[[agent]]\nname = 1\ncommand = 5\ncwd = 3\nworktree = "yes"\ntask = []\n'
        'env = "A=1"\nstyle = 1\nrestart = 3\nmachine = 1979-05-27\n',
        [
            "1:1: team: expected a string, got integer",
            "3:1: agent[0].name: expected a string, got integer",
            "4:1: agent[0].command: expected a string or an array of strings, got integer",
            "5:1: agent[0].cwd: expected a string, got integer",
            "6:1: agent[0].worktree: expected true or false, got string",
            "7:1: agent[0].task: expected a string, got array",
            "8:1: agent[0].env: expected a table, got string",
            "9:1: agent[0].style: expected a string, got integer",
            "10:1: agent[0].restart: expected a policy (never, on-failure, always) or a table,"
            " got integer",
            "11:1: agent[0].machine: expected a string, got date",
        ],
        id="wrong types",
    ),
    pytest.param(
        '[[agent]]\nname = "a"\ncommand = ["sh", 2, true]\n',
        [
            "3:18: agent[0].command[1]: expected a string, got integer",
            "3:21: agent[0].command[2]: expected a string, got boolean",
        ],
        id="wrong types in a command array",
    ),
    pytest.param(
        '[agent]\nname = "a"\n',
        ["1:2: agent: expected [[agent]] tables (an array of tables), got table"],
        id="agent as a table",
    ),
    pytest.param(
        "defaults = 1\n" + AGENT,
        ["1:1: defaults: expected a table, got integer"],
        id="defaults not a table",
    ),
    pytest.param(
        "agent = [1]\n",
        ["1:10: agent[0]: expected a table, got integer"],
        id="an agent that is not a table",
    ),
    pytest.param(
        '[[agent]]\nname = "a"\ncommand = ""\n[[agent]]\nname = "b"\ncommand = []\n'
        '[[agent]]\nname = "c"\ncommand = "   "\n[[agent]]\nname = "d"\ncommand = ["", "x"]\n',
        [
            "3:1: agent[0].command: the command is empty: give the program to run",
            "6:1: agent[1].command: the command is empty: give the program to run",
            "9:1: agent[2].command: the command is empty: give the program to run",
            "12:1: agent[3].command: the command is empty: give the program to run",
        ],
        id="empty commands",
    ),
    pytest.param(
        '[[agent]]\nname = "a"\ncommand = "sh -c \'echo"\n',
        ["3:1: agent[0].command: cannot split the command: no closing quotation"],
        id="a command shlex cannot split",
    ),
    pytest.param(
        '[[agent]]\nname = "a"\n[[agent]]\ncommand = "sh"\n',
        [
            "1:1: agent[0]: missing required key 'command'",
            "3:1: agent[1]: missing required key 'name'",
        ],
        id="missing name and command",
    ),
    pytest.param(
        AGENT + AGENT + '[[agent]]\nname = "A"\ncommand = "sh"\n',
        [
            "5:1: agent[1].name: agent name 'a' is used twice: at lines 2 and 5",
            "8:1: agent[2].name: agent names 'a' and 'A' differ only in case (lines 2 and"
            " 8): their worktrees and branches would collide",
        ],
        id="duplicate names",
    ),
    pytest.param(
        'team = "my team"\n[[agent]]\nname = "bad name"\ncommand = "sh"\n'
        '[[agent]]\nname = "relay"\ncommand = "sh"\n[[agent]]\nname = "-x"\ncommand = "sh"\n'
        f'[[agent]]\nname = "{"n" * 65}"\ncommand = "sh"\n',
        [
            "1:1: team: team name 'my team' is not usable: 1 to 64 letters, digits, '_' or"
            " '-', starting with a letter or digit",
            "3:1: agent[0].name: agent name 'bad name' is not usable: 1 to 64 letters,"
            " digits, '_' or '-', starting with a letter or digit",
            "6:1: agent[1].name: agent name 'relay' is reserved",
            "9:1: agent[2].name: agent name '-x' is not usable: 1 to 64 letters, digits, '_'"
            " or '-', starting with a letter or digit",
            f"12:1: agent[3].name: agent name '{'n' * 65}' is not usable: 1 to 64 letters,"
            " digits, '_' or '-', starting with a letter or digit",
        ],
        id="names messaging refuses",
    ),
    pytest.param(
        "# nothing yet\n",
        [" agent: the team has no agents: add an [[agent]] table with a name and a command"],
        id="empty file",
    ),
    pytest.param(
        "agent = []\n",
        ["1:1: agent: the team has no agents: add an [[agent]] table with a name and a command"],
        id="no agents",
    ),
    pytest.param(
        AGENT + 'style = "claud"\nmachine = "gpu box"\ntask = " "\n',
        [
            "4:1: agent[0].style: expected one of auto, plain, claude, gemini, codex, got 'claud'"
            " (did you mean 'claude'?)",
            "5:1: agent[0].machine: machine label 'gpu box' is not usable: 1 to 128 letters,"
            " digits, '.', '_' or '-', starting with a letter or digit",
            "6:1: agent[0].task: is empty",
        ],
        id="style, machine and task",
    ),
    pytest.param(
        AGENT + 'command = "sh"\n',
        ["4:15: invalid TOML: cannot overwrite a value"],
        id="a key given twice",
    ),
    pytest.param(
        '[[agent]]\nname = "a"\ncommand = ["sh",\n',
        ["4:1: invalid TOML: invalid value"],
        id="syntax error at the end",
    ),
    pytest.param(
        '[[agent]]\nname = "a" "b"\n',
        ["2:12: invalid TOML: expected newline or end of document after a statement"],
        id="syntax error",
    ),
    pytest.param(
        AGENT + 'task = "a\\u0000b"\nenv = { "A=B" = "1", "" = "2", C = "x\\u0000" }\n'
        '[[agent]]\nname = "b"\ncommand = ["sh\\u0000"]\n',
        [
            "4:1: agent[0].task: contains a NUL character",
            "5:9: agent[0].env[\"A=B\"]: 'A=B' is not a usable environment variable name",
            "5:22: agent[0].env[\"\"]: '' is not a usable environment variable name",
            "5:32: agent[0].env.C: contains a NUL character",
            "8:12: agent[1].command[0]: contains a NUL character",
        ],
        id="NUL characters and bad variable names",
    ),
    pytest.param(
        AGENT + 'restart = { policy = "on_failure", backoff = -1, limit = -1 }\n'
        '[[agent]]\nname = "b"\ncommand = "sh"\n'
        "restart = { backoff = nan, max_backoff = inf, limit = 1.5, healthy = true }\n"
        '[[agent]]\nname = "c"\ncommand = "sh"\nrestart = { backoff = 100000 }\n'
        '[[agent]]\nname = "d"\ncommand = "sh"\nrestart = { backoff = 10, max_backoff = 5 }\n'
        '[[agent]]\nname = "e"\ncommand = "sh"\nrestart.backoff = 90\n'
        '[[agent]]\nname = "f"\ncommand = "sh"\nrestart.healthy = 0\n',
        [
            "4:13: agent[0].restart.policy: expected one of never, on-failure, always, got"
            " 'on_failure' (did you mean 'on-failure'?)",
            "4:36: agent[0].restart.backoff: expected a number of seconds from 0, got -1",
            "4:50: agent[0].restart.limit: expected a number of restarts from 0 to 1000000, got -1",
            "8:13: agent[1].restart.backoff: expected a number of seconds from 0, got nan",
            "8:28: agent[1].restart.max_backoff: expected a number of seconds from 0, got inf",
            "8:47: agent[1].restart.limit: expected an integer, got float",
            "8:60: agent[1].restart.healthy: expected a number of seconds, got boolean",
            "12:13: agent[2].restart.backoff: expected at most 86400 seconds (a day), got 100000",
            "16:27: agent[3].restart.max_backoff: max_backoff (5) is less than backoff (10)",
            "20:9: agent[4].restart.backoff: max_backoff (60) is less than backoff (90)",
            "24:9: agent[5].restart.healthy: expected a number of seconds above 0, got 0",
        ],
        id="bad restart values",
    ),
]


@pytest.mark.parametrize(("text", "expected"), ERRORS)
def test_every_error_of_a_file_with_its_position(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    path = write(tmp_path, text)
    assert errors(path) == [f"{path}:{error}" for error in expected]


def test_the_error_carries_every_error_and_the_first_ones_place(tmp_path: Path) -> None:
    path = write(tmp_path, AGENT + 'style = "fancy"\n' + AGENT)
    with pytest.raises(TeamFileError) as caught:
        load_team(path)
    error = caught.value
    assert isinstance(error, SettingsError)
    assert [(e.line, e.column, e.path) for e in error.errors] == [
        (4, 1, "agent[0].style"),
        (6, 1, "agent[1].name"),
    ]
    assert (error.file, error.line, error.column, error.path) == (
        str(path),
        4,
        1,
        "agent[0].style",
    )
    assert str(error) == (
        f"2 errors in the team file {path}:\n"
        f"  {path}:4:1: agent[0].style: expected one of auto, plain, claude, gemini, codex, got"
        " 'fancy'\n"
        f"  {path}:6:1: agent[1].name: agent name 'a' is used twice: at lines 2 and 6"
    )


def test_a_file_of_many_errors_lists_the_first_fifty(tmp_path: Path) -> None:
    path = write(tmp_path, "".join(f'[[agent]]\nname = "a{i}"\ncommand = 1\n' for i in range(60)))
    with pytest.raises(TeamFileError) as caught:
        load_team(path)
    assert len(caught.value.errors) == 60
    lines = str(caught.value).splitlines()
    assert lines[0] == f"60 errors in the team file {path}:"
    assert (
        lines[1]
        == f"  {path}:3:1: agent[0].command: expected a string or an array of strings, got integer"
    )
    assert (
        lines[50]
        == f"  {path}:150:1: agent[49].command: expected a string or an array of strings, got integer"
    )
    assert lines[51:] == ["  and 10 more"]


# -- programs, folders and worktrees on this machine's disk ----------------------------------


def executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_programs_that_cannot_run_are_named(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "plain.txt").write_text("not a program")
    executable(tmp_path / "tools" / "ok.sh")
    path = write(
        tmp_path,
        '[[agent]]\nname = "a"\ncommand = "relay-no-such-program --flag"\n'
        '[[agent]]\nname = "b"\ncommand = ["claud", "-p"]\n'
        '[[agent]]\nname = "c"\ncommand = "./tools/missing.sh"\n'
        '[[agent]]\nname = "d"\ncommand = "./tools/plain.txt"\n'
        '[[agent]]\nname = "e"\ncommand = "tools"\n'
        '[[agent]]\nname = "f"\ncommand = "./tools"\n'
        '[[agent]]\nname = "g"\ncommand = "./tools/ok.sh"\n'
        f'[[agent]]\nname = "h"\ncommand = "{sys.executable}"\n'
        '[[agent]]\nname = "i"\ncommand = "~/bin/agent"\n'
        '[[agent]]\nname = "j"\ncommand = ["$AGENT", "-x"]\n',
    )
    assert errors(path) == [
        f"{path}:3:1: agent[0].command: agent 'a': program 'relay-no-such-program' not found"
        " on PATH",
        f"{path}:6:12: agent[1].command[0]: agent 'b': program 'claud' not found on PATH (did"
        " you mean 'claude'?)",
        f"{path}:9:1: agent[2].command: agent 'c': program './tools/missing.sh' not found"
        f" ({tmp_path}/tools/missing.sh does not exist)",
        f"{path}:12:1: agent[3].command: agent 'd': program './tools/plain.txt' is not"
        f" executable ({tmp_path}/tools/plain.txt)",
        f"{path}:15:1: agent[4].command: agent 'e': program 'tools' not found on PATH",
        f"{path}:18:1: agent[5].command: agent 'f': program './tools' is a folder"
        f" ({tmp_path}/tools)",
        f"{path}:27:1: agent[8].command: agent 'i': program '~/bin/agent' not found"
        f" ({tmp_path}/~/bin/agent does not exist); no shell runs the command: ~ and"
        " $VARIABLES are not expanded",
        f"{path}:30:12: agent[9].command[0]: agent 'j': program '$AGENT' not found on PATH;"
        " no shell runs the command: ~ and $VARIABLES are not expanded",
    ]


def test_programs_are_looked_for_on_the_agents_path_and_in_its_cwd(tmp_path: Path) -> None:
    executable(tmp_path / "bin" / "helper")
    executable(tmp_path / "work" / "run.sh")
    path = write(
        tmp_path,
        f'[[agent]]\nname = "a"\ncommand = "helper"\nenv = {{ PATH = "{tmp_path / "bin"}" }}\n'
        '[[agent]]\nname = "b"\ncommand = "./run.sh"\ncwd = "work"\n'
        '[[agent]]\nname = "c"\ncommand = "sh"\nenv = { PATH = "/nowhere" }\n',
    )
    assert errors(path) == [
        f"{path}:11:1: agent[2].command: agent 'c': program 'sh' not found on the agent's PATH"
    ]
    path.write_text(path.read_text().replace('"/nowhere"', '"/bin:/usr/bin"'))
    assert [agent.name for agent in load_team(path).agents] == ["a", "b", "c"]


def test_working_folders_inside_the_team_and_there(tmp_path: Path) -> None:
    team = tmp_path / "team"
    (team / "inside").mkdir(parents=True)
    (team / "a-file").write_text("")
    (tmp_path / "outside").mkdir()
    (team / "escape").symlink_to(tmp_path / "outside")
    path = write(
        team,
        '[[agent]]\nname = "a"\ncommand = "sh"\ncwd = "../outside"\n'
        '[[agent]]\nname = "b"\ncommand = "sh"\ncwd = "/"\n'
        '[[agent]]\nname = "c"\ncommand = "sh"\ncwd = "missing"\n'
        '[[agent]]\nname = "d"\ncommand = "sh"\ncwd = "a-file"\n'
        '[[agent]]\nname = "e"\ncommand = "sh"\ncwd = "escape"\n'
        f'[[agent]]\nname = "f"\ncommand = "sh"\ncwd = "{team / "inside"}"\n'
        '[[agent]]\nname = "g"\ncommand = "sh"\ncwd = "inside/../inside/."\n',
    )
    assert errors(path) == [
        f"{path}:4:1: agent[0].cwd: cwd '../outside' is outside the team's folder {team}",
        f"{path}:8:1: agent[1].cwd: cwd '/' is outside the team's folder {team}",
        f"{path}:12:1: agent[2].cwd: cwd 'missing' does not exist ({team}/missing)",
        f"{path}:16:1: agent[3].cwd: cwd 'a-file' is not a folder ({team}/a-file)",
        f"{path}:20:1: agent[4].cwd: cwd 'escape' leads outside the team's folder {team}"
        " through a symbolic link",
    ]


def git(folder: Path, *args: str) -> str:
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]
    done = subprocess.run(
        ["git", *identity, "-C", str(folder), *args],
        check=True,
        capture_output=True,
        text=True,
        env=environment,
    )
    return done.stdout


WORKTREE_AGENTS = '[[agent]]\nname = "a"\ncommand = "sh"\nworktree = true\n'


def test_worktree_agents_need_a_repository_with_a_commit(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    path = write(
        plain, WORKTREE_AGENTS + '[[agent]]\nname = "b"\ncommand = "sh"\nworktree = true\n'
    )
    assert errors(path) == [
        f"{path}:4:1: agent[0].worktree: worktree = true cannot be used: {plain} is not in a"
        " git repository",
        f"{path}:8:1: agent[1].worktree: worktree = true cannot be used: {plain} is not in a"
        " git repository",
    ]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    path = write(fresh, WORKTREE_AGENTS)
    assert errors(path) == [
        f"{path}:4:1: agent[0].worktree: worktree = true cannot be used: the repository"
        f" {fresh} has no commit yet (worktrees start from HEAD)"
    ]
    git(fresh, "commit", "-q", "--allow-empty", "-m", "first")
    assert load_team(path).agents[0].worktree is True


def test_a_worktree_agent_has_no_cwd(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    path = write(tmp_path, WORKTREE_AGENTS + 'cwd = "src"\n')
    assert errors(path, check_programs=False) == [
        f"{path}:5:1: agent[0].cwd: cwd conflicts with worktree = true: a worktree agent works"
        " in its own worktree; drop one of them"
    ]


def test_without_program_checks_a_file_of_agents_elsewhere_loads(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[[agent]]\nname = "a"\ncommand = "relay-no-such-program"\ncwd = "gone"\n'
        + WORKTREE_AGENTS.replace('"a"', '"b"'),
    )
    assert errors(path) == [
        f"{path}:4:1: agent[0].cwd: cwd 'gone' does not exist ({tmp_path}/gone)",
        f"{path}:8:1: agent[1].worktree: worktree = true cannot be used: {tmp_path} is not in"
        " a git repository",
    ]
    team = load_team(path, check_programs=False)
    assert [(agent.name, agent.cwd, agent.worktree) for agent in team.agents] == [
        ("a", "gone", False),
        ("b", None, True),
    ]
    # What is wrong whatever the machine is still an error.
    path.write_text(path.read_text().replace('"gone"', '"../gone"'))
    assert errors(path, check_programs=False) == [
        f"{path}:4:1: agent[0].cwd: cwd '../gone' is outside the team's folder {tmp_path}"
    ]


def test_only_the_agents_of_this_machine_are_checked_on_its_disk(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[[agent]]\nname = "a"\ncommand = "relay-no-such-program"\nmachine = "gpu"\n'
        '[[agent]]\nname = "b"\ncommand = "relay-no-such-program"\n',
    )
    assert errors(path, machine="laptop") == [
        f"{path}:7:1: agent[1].command: agent 'b': program 'relay-no-such-program' not found"
        " on PATH"
    ]
    assert len(errors(path, machine="gpu")) == 2
    assert len(errors(path)) == 2


# -- hostile files ------------------------------------------------------------------------


def test_a_file_over_the_cap_is_not_read(tmp_path: Path) -> None:
    path = write(tmp_path, AGENT)
    padding = MAX_TEAM_FILE_BYTES - len(AGENT)
    path.write_text(AGENT + "#" * (padding - 1) + "\n")
    assert path.stat().st_size == MAX_TEAM_FILE_BYTES
    assert [agent.name for agent in load_team(path).agents] == ["a"]
    path.write_text(AGENT + "#" * padding + "\n")
    assert errors(path) == [f"{path}: team file is larger than 1 MiB; not read"]
    with path.open("r+b") as stream:  # a sparse file of 8 GiB is refused as fast
        stream.truncate(8 << 30)
    assert errors(path) == [f"{path}: team file is larger than 1 MiB; not read"]


def test_a_fifo_a_device_or_a_folder_is_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo" / TEAM_FILE_NAME
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    # No writer: reading it would block for ever.
    assert errors(fifo) == [f"{fifo}: is not a regular file (a FIFO, socket or device); not read"]
    device = tmp_path / "device" / TEAM_FILE_NAME
    device.parent.mkdir()
    device.symlink_to("/dev/zero")
    assert errors(device) == [
        f"{device}: is not a regular file (a FIFO, socket or device); not read"
    ]
    folder = tmp_path / "folder" / TEAM_FILE_NAME
    folder.mkdir(parents=True)
    assert errors(folder) == [f"{folder}: is a folder, not a team file"]


def test_text_that_is_not_utf8_is_placed(tmp_path: Path) -> None:
    path = tmp_path / TEAM_FILE_NAME
    path.write_bytes(b'[[agent]]\nname = "caf\xe9"\ncommand = "sh"\n')
    assert errors(path) == [f"{path}:2:12: not valid UTF-8"]
    path.write_bytes(b"\xef\xbb\xbf" + AGENT.encode())  # a byte-order mark is fine
    assert [agent.line for agent in load_team(path).agents] == [1]


@pytest.mark.parametrize(
    "value",
    [
        "[" * 100_000 + "]" * 100_000,
        "{a=" * 50_000 + "1" + "}" * 50_000,
    ],
    ids=["arrays", "inline tables"],
)
def test_deep_nesting_is_an_error(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, AGENT + "task = " + value + "\n")
    assert errors(path) == [f"{path}: invalid TOML: nested too deeply"]


def test_deep_but_readable_nesting_is_placed(tmp_path: Path) -> None:
    path = write(tmp_path, AGENT + "task = " + "[" * 200 + "1" + "]" * 200 + "\n")
    assert errors(path) == [f"{path}:4:1: agent[0].task: expected a string, got array"]
    assert TomlPositions(path.read_text()).locate(("agent", 0, "task", *[0] * 200)) == (4, 208)


def test_too_many_agents(tmp_path: Path) -> None:
    agents = ", ".join(f'{{ name = "a{i}", command = "sh" }}' for i in range(MAX_AGENTS + 1))
    path = write(tmp_path, f"agent = [{agents}]\n")
    assert errors(path) == [f"{path}:1:1: agent: too many agents: 1001 (the limit is 1000)"]
    agents = ", ".join(f'{{ name = "a{i}", command = "sh" }}' for i in range(MAX_AGENTS))
    path.write_text(f"agent = [{agents}]\n")
    assert len(load_team(path).agents) == MAX_AGENTS


def test_a_linked_team_file_reads_relative_paths_from_the_links_folder(tmp_path: Path) -> None:
    elsewhere = write(tmp_path / "dotfiles", AGENT + 'cwd = "src"\n', name="team.toml")
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    link = project / TEAM_FILE_NAME
    link.symlink_to(elsewhere)
    team = load_team(link)
    assert (team.file, team.root) == (str(link), str(project))
    assert team.agents[0].cwd == "src"
    assert errors(elsewhere) == [
        f"{elsewhere}:4:1: agent[0].cwd: cwd 'src' does not exist ({tmp_path}/dotfiles/src)"
    ]


TEAM_KEYS = st.sampled_from(
    [
        *[
            "team",
            "defaults",
            "agent",
            "name",
            "command",
            "cwd",
            "worktree",
            "task",
            "env",
            "style",
            "restart",
            "machine",
        ],
        *["policy", "backoff", "max_backoff", "limit", "healthy", "PATH", "x"],
    ]
)
TEAM_LEAVES = st.builds(
    Scalar,
    st.sampled_from(
        [
            *SCALARS,
            '"sh"',
            '"a"',
            '"b"',
            '"on-failure"',
            '"always"',
            '"claude"',
            '"../x"',
            '"sh -c \'x"',
            "-1",
            "0",
            "5",
            '"relay"',
            '"\\u0000"',
            '""',
        ]
    ),
)
TEAM_DOCUMENTS = st.dictionaries(
    TEAM_KEYS,
    st.recursive(
        TEAM_LEAVES,
        lambda children: st.one_of(
            st.builds(Array, st.lists(children, max_size=3)),
            st.builds(Table, st.dictionaries(TEAM_KEYS, children, max_size=4)),
            st.builds(
                TableArray,
                st.lists(
                    st.builds(Table, st.dictionaries(TEAM_KEYS, children, max_size=5)),
                    min_size=1,
                    max_size=3,
                ),
            ),
        ),
        max_leaves=14,
    ),
    max_size=4,
)


@settings(
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(TEAM_DOCUMENTS, st.randoms(use_true_random=True))
def test_any_document_is_a_team_or_errors_that_each_name_a_line(
    tmp_path: Path, document: dict[str, Any], chooser: random.Random
) -> None:
    path = tmp_path / TEAM_FILE_NAME
    path.write_text(Writer(chooser).document(document))
    try:
        team = load_team(path, check_programs=False)
    except TeamFileError as error:
        for each in error.errors:
            assert each.line is not None or (each.path == "agent" and "no agents" in each.message)
    else:
        assert team.agents


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_are_a_team_or_a_team_file_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / TEAM_FILE_NAME
    path.write_bytes(data)
    try:
        load_team(path)
    except TeamFileError as error:
        assert error.errors


def test_the_specs_example_is_a_team(tmp_path: Path) -> None:
    spec = Path(__file__).parent.parent / "spec" / "fleet.md"
    example = re.search(r"```toml\n(.*?)```", spec.read_text(), re.DOTALL)
    assert example is not None
    path = write(tmp_path, example.group(1))
    team = load_team(path, check_programs=False)
    assert team.name == "builders"
    assert [(agent.name, agent.command, agent.restart) for agent in team.agents] == [
        ("alice", ["claude", "--model", "opus"], Restart(backoff=2.0)),
        ("bob", ["gemini", "--yolo"], Restart(policy="always", backoff=2.0)),
        (
            "checker",
            ["./scripts/check-loop.sh"],
            Restart(policy="always", backoff=5.0, max_backoff=300.0, limit=20, healthy=120.0),
        ),
    ]
    assert team.agents[1].env == {"RELAY_LEVEL": "strict", "PORT": "8081"}
