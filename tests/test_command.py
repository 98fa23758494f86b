"""From a command string to an argv: project variables, direct vs shell, exec form (DESIGN §5, §6)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.engine.command import (
    PROJECT_VARS,
    Launch,
    direct_words,
    expand_project_vars,
    prepare_launch,
)

NASTY = '/it\'s a "dir" $HOME `x` \\z'
VALUES = {"RELAY_PROJECT_DIR": "/a b", "CLAUDE_PROJECT_DIR": "/c", "GEMINI_PROJECT_DIR": "/g"}

# Any text sh can hold in a variable: no NUL, no lone surrogates.
sh_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"))


def sh_words(command: str, env: dict[str, str] | None = None) -> list[str]:
    """The arguments sh passes to printf for `printf '%s\\0' COMMAND`."""
    completed = subprocess.run(
        ["/bin/sh", "-c", "printf '%s\\0' " + command],
        capture_output=True,
        check=True,
        env=env if env is not None else clean_env(),
    )
    return completed.stdout.decode().split("\0")[:-1]


def clean_env() -> dict[str, str]:
    """The environment without the project variables: proves relay expanded them."""
    return {key: value for key, value in os.environ.items() if key not in PROJECT_VARS}


# ---- expand_project_vars


@pytest.mark.parametrize(
    ("command", "expanded"),
    [
        ("$RELAY_PROJECT_DIR/hook.sh", "'/a b'/hook.sh"),
        ("${RELAY_PROJECT_DIR}/hook.sh", "'/a b'/hook.sh"),
        ('"$CLAUDE_PROJECT_DIR/x"', '"/c/x"'),
        ('"${GEMINI_PROJECT_DIR}"', '"/g"'),
        ("'$RELAY_PROJECT_DIR'", "'$RELAY_PROJECT_DIR'"),
        ("\\$RELAY_PROJECT_DIR", "\\$RELAY_PROJECT_DIR"),
        ('"\\$RELAY_PROJECT_DIR"', '"\\$RELAY_PROJECT_DIR"'),
        ('"\\a$CLAUDE_PROJECT_DIR"', '"\\a/c"'),
        ("$RELAY_PROJECT_DIRX $HOME $1 ${RELAY_PROJECT_DIR:-x}", None),
        ("$$RELAY_PROJECT_DIR", None),
        ("echo $(cat '$CLAUDE_PROJECT_DIR') \"$(echo '$CLAUDE_PROJECT_DIR')\"", None),
        (
            "echo x # it's $CLAUDE_PROJECT_DIR\necho $CLAUDE_PROJECT_DIR",
            "echo x # it's $CLAUDE_PROJECT_DIR\necho '/c'",
        ),
        ("a#$CLAUDE_PROJECT_DIR", "a#'/c'"),
        ("`echo $CLAUDE_PROJECT_DIR`", "`echo '/c'`"),
    ],
)
def test_expansion(command: str, expanded: str | None) -> None:
    assert expand_project_vars(command, VALUES) == (command if expanded is None else expanded)


def test_only_given_names_are_expanded() -> None:
    assert expand_project_vars(
        "$RELAY_PROJECT_DIR $CLAUDE_PROJECT_DIR", {"CLAUDE_PROJECT_DIR": "/c"}
    ) == ("$RELAY_PROJECT_DIR '/c'")
    assert expand_project_vars("$RELAY_PROJECT_DIR", {}) == "$RELAY_PROJECT_DIR"


def test_quotes_in_a_value_are_escaped_for_each_context() -> None:
    values = {"RELAY_PROJECT_DIR": NASTY}
    assert expand_project_vars("$RELAY_PROJECT_DIR", values) == (
        "'/it'\\''s a \"dir\" $HOME `x` \\z'"
    )
    assert expand_project_vars('"$RELAY_PROJECT_DIR"', values) == (
        '"/it\'s a \\"dir\\" \\$HOME \\`x\\` \\\\z"'
    )


def test_sh_sees_the_path_in_all_three_contexts() -> None:
    values = {"RELAY_PROJECT_DIR": NASTY}
    command = (
        "$RELAY_PROJECT_DIR/a \"$RELAY_PROJECT_DIR/b\" '$RELAY_PROJECT_DIR/c' x${RELAY_PROJECT_DIR}"
    )
    assert sh_words(expand_project_vars(command, values)) == [
        f"{NASTY}/a",
        f"{NASTY}/b",
        "$RELAY_PROJECT_DIR/c",
        f"x{NASTY}",
    ]


def test_a_hook_under_a_nasty_path_runs_with_the_right_argv(tmp_path: Path) -> None:
    project = tmp_path / 'my project\'s "dir" $x'
    project.mkdir()
    hook = project / "hook.sh"
    hook.write_text('#!/bin/sh\nprintf \'%s\\0\' "$0" "$@"\n')
    hook.chmod(0o755)
    values = {name: str(project) for name in PROJECT_VARS}
    launch = prepare_launch(
        "$CLAUDE_PROJECT_DIR/hook.sh \"$RELAY_PROJECT_DIR\" '$GEMINI_PROJECT_DIR' | cat",
        None,
        values,
    )
    assert launch.mode == "shell"
    completed = subprocess.run(launch.argv, capture_output=True, check=True, env=clean_env())
    assert completed.stdout.decode().split("\0")[:-1] == [
        str(hook),
        str(project),
        "$GEMINI_PROJECT_DIR",
    ]


@settings(max_examples=60, deadline=None)
@given(value=sh_text)
def test_any_value_reaches_sh_intact(value: str) -> None:
    values = {"RELAY_PROJECT_DIR": value}
    expanded = expand_project_vars('$RELAY_PROJECT_DIR "$RELAY_PROJECT_DIR"', values)
    assert sh_words(expanded) == [value, value]


# ---- direct or shell


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("python3 .relay/hooks/guard.py", ("python3", ".relay/hooks/guard.py")),
        ("  ./hook.sh   --level=strict\t-v ", ("./hook.sh", "--level=strict", "-v")),
        ("node 'my hooks/a.js' \"b c\" ''", ("node", "my hooks/a.js", "b c", "")),
        ("a'b c'\"d\"e", ("ab cde",)),
        ("cmd 'a*b' \"[x]\" '$HOME'", ("cmd", "a*b", "[x]", "$HOME")),
        ("cmd a=b", ("cmd", "a=b")),
    ],
)
def test_plain_commands_run_directly(command: str, argv: tuple[str, ...]) -> None:
    assert prepare_launch(command, None, {}) == Launch(argv=argv, mode="direct")


@pytest.mark.parametrize(
    "command",
    [
        "a | b",
        "a && b",
        "a; b",
        "a > out",
        "a < in",
        "(a)",
        "a $HOME",
        "a `b`",
        "a \\ b",
        "ls *.py",
        "ls ?",
        "ls [ab]",
        "ls ~",
        "a # comment",
        "a\nb",
        "a\rb",
        "{ a; }",
        'a "$HOME"',
        'a "x\\y"',
        "FOO=1 a",
        "cd /tmp",
        "export A=1",
        "exit 2",
        "if true; then a; fi",
        "echo 'a\\nb'",
        "true",
        "'unterminated",
        "",
        "   ",
    ],
)
def test_commands_with_shell_syntax_use_sh(command: str) -> None:
    assert prepare_launch(command, None, {}) == Launch(
        argv=("/bin/sh", "-c", command), mode="shell"
    )


def test_an_expanded_path_with_spaces_still_runs_directly() -> None:
    values = {"RELAY_PROJECT_DIR": "/my project"}
    assert prepare_launch("$RELAY_PROJECT_DIR/hook.sh x", None, values) == Launch(
        argv=("/my project/hook.sh", "x"), mode="direct"
    )
    assert prepare_launch('"$RELAY_PROJECT_DIR/hook.sh" x', None, values) == Launch(
        argv=("/my project/hook.sh", "x"), mode="direct"
    )


def test_a_quote_in_the_path_falls_back_to_sh() -> None:
    launch = prepare_launch("$RELAY_PROJECT_DIR/hook.sh", None, {"RELAY_PROJECT_DIR": "/it's"})
    assert launch == Launch(argv=("/bin/sh", "-c", "'/it'\\''s'/hook.sh"), mode="shell")


# Commands built from parts that need no shell (bare words, '…', "…" without $ ` \),
# and raw strings that mostly do: whenever direct_words splits one, sh must agree.
command_part = st.one_of(
    st.text(st.sampled_from(list("ab=-./%:,@+")), min_size=1),
    st.text(st.sampled_from(list('ab "*$\\|;`\t#~')), max_size=4).map(lambda text: f"'{text}'"),
    st.text(st.sampled_from(list("ab '*|;\t#~[")), max_size=4).map(lambda text: f'"{text}"'),
    st.sampled_from([" ", "\t", "  "]),
)
plain_commands = st.lists(command_part, max_size=8).map("".join)
raw_commands = st.text(st.sampled_from(list("ab =-./'\"\t*$\\;|")), max_size=20)


@settings(max_examples=150, deadline=None)
@given(command=st.one_of(plain_commands, raw_commands))
def test_direct_split_agrees_with_sh(command: str) -> None:
    words = direct_words(command)
    if words is not None:
        assert sh_words(command) == words


# ---- exec form


def test_exec_form_never_uses_a_shell_and_substitutes_raw_values() -> None:
    values = {"RELAY_PROJECT_DIR": "/it's a dir", "CLAUDE_PROJECT_DIR": "/c"}
    launch = prepare_launch(
        "$RELAY_PROJECT_DIR/hook.py",
        ["${CLAUDE_PROJECT_DIR}/x", "$HOME", "a | b", "$RELAY_PROJECT_DIRX"],
        values,
    )
    assert launch == Launch(
        argv=("/it's a dir/hook.py", "/c/x", "$HOME", "a | b", "$RELAY_PROJECT_DIRX"), mode="exec"
    )


def test_exec_form_with_no_args() -> None:
    assert prepare_launch("echo", [], {}) == Launch(argv=("echo",), mode="exec")
