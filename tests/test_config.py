"""Settings files: paths, discovery order, validation errors with file:line, warnings."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import platformdirs
import pytest

from relay.config import paths
from relay.config.discovery import SettingsSet, discover, load_settings
from relay.config.loader import (
    load_settings_file,
    parse_settings,
    render_path,
    validate_matcher,
)
from relay.config.model import HookEntry, LoadedSettings, Settings
from relay.config.paths import find_project_root, state_dir, system_settings_path
from relay.errors import SettingsError

DESIGN_EXAMPLE = {
    "hooks": {
        "BeforeTool": [
            {
                "matcher": "run_shell_command|Bash",
                "sequential": False,
                "hooks": [
                    {
                        "type": "command",
                        "name": "guard",
                        "command": "python3 .relay/hooks/guard.py",
                        "timeout": 10,
                        "env": {"LEVEL": "strict"},
                        "failClosed": False,
                    }
                ],
            }
        ],
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "./claude-hook.sh"}]}
        ],
    },
    "hooksConfig": {"enabled": True, "disabled": ["guard"]},
    "patterns": {"deploy": {"command": "./hooks/deploy.sh", "timeout": 30}, "memory": "builtin"},
    "memory": {"backend": "sqlite", "injectOnStart": True, "promptOnEnd": True},
    "session": {"idleSeconds": 30},
}


def parse(document: Any) -> LoadedSettings:
    """Parse a settings document given as a Python object or as raw text."""
    if isinstance(document, str):
        data = document.encode()
    elif isinstance(document, bytes):
        data = document
    else:
        data = json.dumps(document).encode()
    return parse_settings(data, file="settings.json", scope="user")


def parse_error(document: Any) -> SettingsError:
    with pytest.raises(SettingsError) as caught:
        parse(document)
    return caught.value


def one_hook(entry: dict[str, Any], event: str = "BeforeTool", **group: Any) -> dict[str, Any]:
    return {"hooks": {event: [{**group, "hooks": [entry]}]}}


def write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


# --- paths ---------------------------------------------------------------------------------


def test_relay_home_follows_the_environment(relay_home: Path) -> None:
    assert paths.relay_home() == relay_home


def test_relay_home_defaults_to_the_platform_config_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RELAY_HOME")
    assert paths.relay_home() == Path(platformdirs.user_config_dir("agent-relay"))


def test_state_dir_lives_under_relay_home_and_is_not_created_by_asking(relay_home: Path) -> None:
    assert state_dir() == relay_home / "state"
    assert not (relay_home / "state").exists()  # writers create it; readers never fail on it


def test_system_settings_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert system_settings_path() == tmp_path / "no-system-settings.json"
    monkeypatch.delenv("RELAY_SYSTEM_SETTINGS")
    assert system_settings_path() == Path("/etc/agent-relay/settings.json")


def test_project_root_is_found_by_git_folder(tmp_path: Path) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    deep = tmp_path / "repo" / "src" / "pkg"
    deep.mkdir(parents=True)
    assert find_project_root(deep) == tmp_path / "repo"
    assert find_project_root(tmp_path / "repo") == tmp_path / "repo"


def test_project_root_is_found_by_git_file_of_a_worktree(tmp_path: Path) -> None:
    write(tmp_path / "worktree" / ".git", "gitdir: /elsewhere\n")
    assert find_project_root(tmp_path / "worktree") == tmp_path / "worktree"


def test_project_root_is_found_by_relay_folder_and_the_nearest_wins(tmp_path: Path) -> None:
    (tmp_path / "outer" / ".git").mkdir(parents=True)
    (tmp_path / "outer" / "inner" / ".relay").mkdir(parents=True)
    (tmp_path / "outer" / "inner" / "sub").mkdir()
    assert find_project_root(tmp_path / "outer" / "inner" / "sub") == tmp_path / "outer" / "inner"


def test_a_relay_file_is_not_a_project_marker(tmp_path: Path) -> None:
    write(tmp_path / "plain" / ".relay", "not a folder")
    assert find_project_root(tmp_path / "plain") != tmp_path / "plain"


def test_a_shared_temporary_folder_is_never_a_project_root(tmp_path: Path) -> None:
    # As /tmp: world-writable with the sticky bit. Codex's sandbox creates an empty
    # /tmp/.git while it runs, and anyone may create /tmp/.relay.
    shared = tmp_path / "shared"
    (shared / ".git").mkdir(parents=True)
    (shared / ".relay").mkdir()
    (shared / "scratch").mkdir()
    shared.chmod(0o1777)
    assert find_project_root(shared / "scratch") not in (shared, shared / "scratch")
    assert find_project_root(shared) != shared
    (shared / "scratch" / ".git").mkdir()  # a project inside one is a project
    assert find_project_root(shared / "scratch") == shared / "scratch"
    shared.chmod(0o777)  # world-writable but not sticky: a folder like any other
    assert find_project_root(shared) == shared
    shared.chmod(0o1755)
    assert find_project_root(shared) == shared


# --- a valid file --------------------------------------------------------------------------


def test_the_design_example_parses_without_warnings() -> None:
    loaded = parse(DESIGN_EXAMPLE)
    assert loaded.warnings == []
    assert loaded.file == "settings.json"
    assert loaded.scope == "user"
    guard = loaded.settings.hooks["BeforeTool"][0].hooks[0]
    assert guard == HookEntry(
        command="python3 .relay/hooks/guard.py", name="guard", timeout=10, env={"LEVEL": "strict"}
    )
    assert loaded.settings.hooks["PreToolUse"][0].matcher == "Bash"
    assert loaded.settings.hooksConfig.disabled == ["guard"]
    assert loaded.settings.patterns["memory"] == "builtin"
    assert loaded.settings.patterns["deploy"] == HookEntry(command="./hooks/deploy.sh", timeout=30)
    assert loaded.settings.session.idleSeconds == 30


@pytest.mark.parametrize("text", ["", "   \n\t\n"])
def test_an_empty_file_is_an_empty_object(text: str) -> None:
    loaded = parse(text)
    assert loaded.settings == Settings()
    assert loaded.warnings == []


def test_a_utf8_bom_is_accepted() -> None:
    assert parse(b'\xef\xbb\xbf{"hooks": {}}').settings == Settings()


def test_schema_key_does_not_warn() -> None:
    assert parse({"$schema": "https://example.com/relay.json"}).warnings == []


# --- malformed JSON: file, line and column -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column", "reason"),
    [
        ('{"hooks": {},}', 1, 14, "trailing comma in object"),
        ('{\n  "hooks": {\n    "BeforeTool" []\n  }\n}\n', 3, 18, "expected ':'"),
        ('{\n  "a": 1\n  "b": 2\n}', 3, 3, "expected ',' or '}'"),
        # Multi-byte characters before the fault count as one column each.
        ('{\n  "description": "héllo wörld → ✓", oops\n}', 2, 37, "keys must be strings"),
        ('{"é✓": 1 2}', 1, 10, "expected ',' or '}'"),
        ('{"hooks": {\n  "BeforeTool": [\n', 2, 18, "unexpected end of file"),
        ('{"a": 1} {"b": 2}', 1, 10, "trailing characters"),
        ("{}\n\n  ]", 3, 3, "trailing characters"),
    ],
)
def test_malformed_json_names_file_line_and_column(
    text: str, line: int, column: int, reason: str
) -> None:
    error = parse_error(text)
    assert (error.file, error.line, error.column, error.path) == (
        "settings.json",
        line,
        column,
        None,
    )
    assert reason in error.message
    assert str(error).startswith(f"settings.json:{line}:{column}: invalid JSON")


def test_invalid_utf8_names_its_position() -> None:
    error = parse_error(b'{\n  "name": "ab\xff"\n}')
    assert (error.line, error.column) == (2, 14)
    assert "UTF-8" in error.message


def test_an_unreadable_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings_file(tmp_path, "user")
    assert caught.value.file == str(tmp_path)
    assert "cannot read" in caught.value.message


def test_load_settings_file_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.json", "{,}")
    with pytest.raises(SettingsError) as caught:
        load_settings_file(path, "project")
    assert caught.value.file == str(path)
    assert (caught.value.line, caught.value.column) == (1, 2)


# --- wrong types: file and path ------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "path", "message"),
    [
        ([], None, "expected object, got array"),
        ({"hooks": []}, "hooks", "expected object, got array"),
        ({"hooks": {"BeforeTool": {}}}, "hooks.BeforeTool", "expected array, got object"),
        ({"hooks": {"BeforeTool": [[]]}}, "hooks.BeforeTool[0]", "expected object, got array"),
        (
            {"hooks": {"BeforeTool": [{"matcher": 3}]}},
            "hooks.BeforeTool[0].matcher",
            "expected string or null, got number",
        ),
        (
            {"hooks": {"BeforeTool": [{"sequential": "yes"}]}},
            "hooks.BeforeTool[0].sequential",
            "expected boolean, got string",
        ),
        (
            {
                "hooks": {
                    "BeforeTool": [{"hooks": [{"command": "a"}, {"command": "b", "timeout": "9"}]}]
                }
            },
            "hooks.BeforeTool[0].hooks[1].timeout",
            "expected number, got string",
        ),
        (one_hook({"command": "a", "timeout": True}), None, "expected number, got boolean"),
        (
            one_hook({"command": 7}),
            "hooks.BeforeTool[0].hooks[0].command",
            "expected string, got number",
        ),
        (one_hook({}), "hooks.BeforeTool[0].hooks[0]", "missing required field 'command'"),
        (
            one_hook({"command": "a", "args": ["x", 1]}),
            "hooks.BeforeTool[0].hooks[0].args[1]",
            "expected string, got number",
        ),
        (
            one_hook({"command": "a", "env": {"LEVEL": 2}}),
            "hooks.BeforeTool[0].hooks[0].env.LEVEL",
            "expected string, got number",
        ),
        (
            one_hook({"command": "a", "env": {"A B": None}}),
            'hooks.BeforeTool[0].hooks[0].env["A B"]',
            "expected string, got null",
        ),
        (
            {"hooksConfig": {"disabled": "guard"}},
            "hooksConfig.disabled",
            "expected array, got string",
        ),
        ({"hooksConfig": []}, "hooksConfig", "expected object, got array"),
        ({"memory": {"injectOnStart": 1}}, "memory.injectOnStart", "expected boolean, got number"),
        ({"session": {"idleSeconds": "30"}}, "session.idleSeconds", "expected number, got string"),
        ({"patterns": {"deploy": 5}}, "patterns.deploy", "expected string or object, got number"),
        (
            {"patterns": {"deploy": {"command": "x", "timeout": None}}},
            "patterns.deploy.timeout",
            "expected number, got null",
        ),
    ],
)
def test_a_wrong_type_names_the_file_and_path(
    document: Any, path: str | None, message: str
) -> None:
    error = parse_error(document)
    assert error.file == "settings.json"
    if path is not None:
        assert error.path == path
    assert error.message == message


def test_a_wrong_type_also_gives_the_line_of_the_field() -> None:
    text = """{
  "hooks": {
    "BeforeTool": [
      {
        "matcher": "Bash",
        "hooks": [
          {"command": "a"},
          {"command": "b",
           "timeout": "10"}
        ]
      }
    ]
  }
}
"""
    error = parse_error(text)
    assert error.path == "hooks.BeforeTool[0].hooks[1].timeout"
    assert (error.line, error.column) == (9, 12)
    assert str(error) == (
        "settings.json:9:12: hooks.BeforeTool[0].hooks[1].timeout: expected number, got string"
    )


@pytest.mark.parametrize("timeout", [0, -5])
def test_timeout_must_be_positive(timeout: int) -> None:
    error = parse_error(one_hook({"command": "a", "timeout": timeout}))
    assert error.path == "hooks.BeforeTool[0].hooks[0].timeout"
    assert error.message == f"expected number > 0, got {timeout}"


def test_an_empty_command_is_an_error() -> None:
    error = parse_error(one_hook({"command": "  "}))
    assert error.path == "hooks.BeforeTool[0].hooks[0].command"


def test_render_path_quotes_keys_that_are_not_plain() -> None:
    assert render_path(("hooks", "BeforeTool", 0, "hooks", 1, "timeout")) == (
        "hooks.BeforeTool[0].hooks[1].timeout"
    )
    assert render_path(("patterns", "my-ns")) == "patterns.my-ns"
    assert render_path(("a.b", 2)) == '["a.b"][2]'
    assert render_path(()) == ""


# --- unknown keys and events ---------------------------------------------------------------


def test_unknown_keys_anywhere_are_warnings_with_paths() -> None:
    text = """{
  "permissions": {"allow": []},
  "hooks": {
    "PreToolUse": [
      {"matcher": "Bash", "comment": "x",
       "hooks": [{"type": "command", "command": "./a.sh", "async": true,
                  "statusMessage": "checking"}]}
    ]
  },
  "hooksConfig": {"enabled": true, "notifications": false},
  "memory": {"backend": "sqlite", "size": 3},
  "session": {"idle": 5},
  "patterns": {"deploy": {"command": "./d.sh", "retries": 2}}
}"""
    loaded = parse(text)
    found = [(warning.path, warning.line) for warning in loaded.warnings]
    assert found == [
        ("permissions", 2),
        ("hooks.PreToolUse[0].comment", 5),
        ("hooks.PreToolUse[0].hooks[0].async", 6),
        ("hooks.PreToolUse[0].hooks[0].statusMessage", 7),
        ("hooksConfig.notifications", 10),
        ("memory.size", 11),
        ("session.idle", 12),
        ("patterns.deploy.retries", 13),
    ]
    assert all(warning.file == "settings.json" for warning in loaded.warnings)
    assert "unknown key 'async'" in loaded.warnings[2].message
    assert str(loaded.warnings[2]).startswith(
        "settings.json:6: hooks.PreToolUse[0].hooks[0].async:"
    )
    # The file still works.
    assert loaded.settings.hooks["PreToolUse"][0].hooks[0].command == "./a.sh"
    assert loaded.settings.patterns["deploy"] == HookEntry(command="./d.sh")


def test_a_misspelt_key_gets_a_suggestion() -> None:
    (warning,) = parse(one_hook({"command": "a", "failclosed": True})).warnings
    assert warning.path == "hooks.BeforeTool[0].hooks[0].failclosed"
    assert warning.message == "unknown key 'failclosed' ignored (did you mean 'failClosed'?)"


def test_an_unknown_event_warns_with_a_suggestion_and_is_kept() -> None:
    loaded = parse({"hooks": {"BeforeTol": [{"hooks": [{"command": "a"}]}]}})
    (warning,) = loaded.warnings
    assert warning.path == "hooks.BeforeTol"
    assert "unknown event 'BeforeTol'" in warning.message
    assert "did you mean 'BeforeTool'?" in warning.message
    assert loaded.settings.hooks["BeforeTol"][0].hooks[0].command == "a"


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("pretooluse", "PreToolUse"), ("SessionStar", "SessionStart"), ("PostToolUs", "PostToolUse")],
)
def test_unknown_event_suggestions(name: str, suggestion: str) -> None:
    (warning,) = parse({"hooks": {name: []}}).warnings
    assert f"did you mean {suggestion!r}?" in warning.message


def test_an_unknown_event_far_from_any_name_has_no_suggestion() -> None:
    (warning,) = parse({"hooks": {"Zzzzzzzz": []}}).warnings
    assert "did you mean" not in warning.message


def test_every_dialects_event_names_are_known() -> None:
    names = ["BeforeTool", "PreToolUse", "Stop", "SubagentStop", "PatternMatch", "Notification"]
    assert parse({"hooks": {name: [] for name in names}}).warnings == []


# --- timeouts, matchers, signals, types, patterns ------------------------------------------


def test_a_timeout_that_looks_like_milliseconds_warns() -> None:
    loaded = parse(one_hook({"command": "a", "timeout": 30000}))
    (warning,) = loaded.warnings
    assert warning.path == "hooks.BeforeTool[0].hooks[0].timeout"
    assert warning.message == "did you mean milliseconds? 30000 seconds is 8.3 hours"
    assert loaded.settings.hooks["BeforeTool"][0].hooks[0].timeout == 30000


def test_a_timeout_of_ten_minutes_is_fine_and_a_bit_more_warns() -> None:
    assert parse(one_hook({"command": "a", "timeout": 600})).warnings == []
    (warning,) = parse(one_hook({"command": "a", "timeout": 900})).warnings
    assert warning.message == "did you mean milliseconds? 900 seconds is 15.0 minutes"


@pytest.mark.parametrize(
    "matcher", ["", "*", "Bash", "Bash|Edit", "Edit, Write", "run_shell-command", "mcp__.*", "^Re"]
)
def test_valid_matchers(matcher: str) -> None:
    assert validate_matcher(matcher) is None
    assert parse(one_hook({"command": "a"}, matcher=matcher)).warnings == []


@pytest.mark.parametrize("matcher", ["(", "Bash[", "*Bash", "a{2,1}"])
def test_an_invalid_regex_matcher_is_an_error_naming_its_path(matcher: str) -> None:
    problem = validate_matcher(matcher)
    assert problem is not None
    assert "invalid regular expression" in problem
    error = parse_error(
        {
            "hooks": {
                "AfterTool": [{"matcher": "Bash", "hooks": []}],
                "BeforeTool": [{"hooks": []}, {"matcher": matcher, "hooks": []}],
            }
        }
    )
    assert error.path == "hooks.BeforeTool[1].matcher"
    assert error.message == problem


@pytest.mark.parametrize("name", ["SIGTERM", "SIGKILL", "SIGINT", "SIGHUP"])
def test_real_signal_names_are_accepted(name: str) -> None:
    loaded = parse(one_hook({"command": "a", "signal": name}))
    assert loaded.settings.hooks["BeforeTool"][0].hooks[0].signal == name


@pytest.mark.parametrize("name", ["TERM", "sigterm", "SIGNOPE", ""])
def test_an_unknown_signal_is_an_error(name: str) -> None:
    error = parse_error(one_hook({"command": "a", "signal": name}))
    assert error.path == "hooks.BeforeTool[0].hooks[0].signal"
    assert repr(name) in error.message


def test_non_command_hooks_are_skipped_with_a_warning() -> None:
    document = {
        "hooks": {
            "Stop": [
                {
                    "hooks": [
                        {"type": "prompt", "prompt": "Is the task done?"},
                        {"type": "command", "command": "./keep.sh"},
                        {"type": "http", "url": "https://example.com"},
                        {"command": "./also.sh"},
                    ]
                }
            ]
        }
    }
    loaded = parse(document)
    assert [(warning.path, warning.message) for warning in loaded.warnings] == [
        ("hooks.Stop[0].hooks[0].type", "hook type 'prompt' is not supported; hook skipped"),
        ("hooks.Stop[0].hooks[2].type", "hook type 'http' is not supported; hook skipped"),
    ]
    commands = [entry.command for entry in loaded.settings.hooks["Stop"][0].hooks]
    assert commands == ["./keep.sh", "./also.sh"]


def test_an_error_after_a_skipped_hook_names_the_original_index() -> None:
    document = one_hook({"type": "prompt", "prompt": "x"})
    document["hooks"]["BeforeTool"][0]["hooks"].append({"command": "a", "timeout": "x"})
    assert parse_error(document).path == "hooks.BeforeTool[0].hooks[1].timeout"


def test_a_non_string_type_is_a_type_error() -> None:
    error = parse_error(one_hook({"command": "a", "type": 1}))
    assert error.path == "hooks.BeforeTool[0].hooks[0].type"


@pytest.mark.parametrize("name", ["relay", "memory"])
def test_builtin_patterns(name: str) -> None:
    assert parse({"patterns": {name: "builtin"}}).settings.patterns == {name: "builtin"}


def test_builtin_is_only_for_builtin_namespaces() -> None:
    error = parse_error({"patterns": {"memory": "builtin", "deploy": "builtin"}})
    assert error.path == "patterns.deploy"
    assert "built-in namespace" in error.message


def test_a_pattern_string_other_than_builtin_is_an_error() -> None:
    error = parse_error({"patterns": {"deploy": "./deploy.sh"}})
    assert error.path == "patterns.deploy"
    assert error.message == "expected \"builtin\" or a hook object, got string './deploy.sh'"


def test_pattern_hooks_are_validated_like_hooks() -> None:
    loaded = parse(
        {"patterns": {"deploy": {"command": "./d.sh", "timeout": 5000}, "ask": {"type": "prompt"}}}
    )
    assert loaded.settings.patterns == {"deploy": HookEntry(command="./d.sh", timeout=5000)}
    assert [warning.path for warning in loaded.warnings] == [
        "patterns.deploy.timeout",
        "patterns.ask.type",
    ]


def test_a_pattern_name_that_can_never_match_warns() -> None:
    (warning,) = parse({"patterns": {"Deploy": {"command": "./d.sh"}}}).warnings
    assert warning.path == "patterns.Deploy"
    assert "never matches" in warning.message


# --- discovery -----------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / "src" / "deep").mkdir(parents=True)
    return root


def hook_file(command: str) -> dict[str, Any]:
    return one_hook({"command": command}, event="SessionStart")


def test_discovery_order_with_every_layer(
    project: Path, relay_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = write(tmp_path / "etc" / "settings.json", hook_file("system"))
    monkeypatch.setenv("RELAY_SYSTEM_SETTINGS", str(system))
    user = write(relay_home / "settings.json", hook_file("user"))
    first = write(tmp_path / "extra" / "one.json", hook_file("one"))
    second = write(tmp_path / "extra" / "two.json", hook_file("two"))
    shared = write(project / ".relay" / "settings.json", hook_file("project"))
    local = write(project / ".relay" / "settings.local.json", hook_file("local"))

    found = discover(project / "src" / "deep", [second, first])
    assert found == [
        (system, "system"),
        (user, "user"),
        (second, "settings"),
        (first, "settings"),
        (shared, "project"),
        (local, "project-local"),
    ]

    loaded = load_settings(project / "src" / "deep", [second, first])
    assert isinstance(loaded, SettingsSet)
    assert loaded.root == project
    assert [
        (file.scope, file.settings.hooks["SessionStart"][0].hooks[0].command)
        for file in loaded.files
    ] == [
        ("system", "system"),
        ("user", "user"),
        ("settings", "two"),
        ("settings", "one"),
        ("project", "project"),
        ("project-local", "local"),
    ]
    assert [file.file for file in loaded.files] == [str(path) for path, _ in found]


def test_missing_files_are_simply_absent(project: Path) -> None:
    assert discover(project) == []
    loaded = load_settings(project)
    assert loaded.root == project
    assert loaded.files == []
    assert loaded.warnings == []


def test_only_the_project_local_file(project: Path) -> None:
    local = write(project / ".relay" / "settings.local.json", {})
    assert discover(project / "src") == [(local, "project-local")]


def test_no_project_root_means_no_project_files(tmp_path: Path, relay_home: Path) -> None:
    user = write(relay_home / "settings.json", {})
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    if find_project_root(lonely) is not None:
        pytest.skip("the temporary folder sits inside a project")
    assert discover(lonely) == [(user, "user")]
    assert load_settings(lonely).root is None


def test_a_missing_settings_option_file_is_an_error(project: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(SettingsError) as caught:
        discover(project, [missing])
    assert caught.value.file == str(missing)
    assert "not found" in caught.value.message


def test_a_folder_given_as_settings_is_an_error(project: Path, tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        discover(project, [tmp_path])
    assert caught.value.file == str(tmp_path)


def test_discovery_defaults_to_the_working_directory(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = write(project / ".relay" / "settings.json", {})
    monkeypatch.chdir(project / "src" / "deep")
    assert discover() == [(project / ".relay" / "settings.json", "project")]
    assert load_settings().root == Path(os.getcwd()).parents[1]
    assert shared.is_file()


def test_a_file_reached_twice_loads_once(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # RELAY_HOME pointed at the project's .relay folder: the file is the user's.
    monkeypatch.setenv("RELAY_HOME", str(project / ".relay"))
    shared = write(project / ".relay" / "settings.json", {})
    assert discover(project) == [(shared, "user")]


def test_warnings_of_every_file_are_gathered_in_order(project: Path, relay_home: Path) -> None:
    write(relay_home / "settings.json", {"userTypo": 1})
    write(project / ".relay" / "settings.json", {"projectTypo": 1})
    loaded = load_settings(project)
    assert [(warning.file, warning.path) for warning in loaded.warnings] == [
        (str(relay_home / "settings.json"), "userTypo"),
        (str(project / ".relay" / "settings.json"), "projectTypo"),
    ]


def test_a_bad_project_file_is_set_aside_and_named(project: Path, relay_home: Path) -> None:
    user = write(
        relay_home / "settings.json", {"hooks": {"BeforeTool": [{"hooks": [{"command": "g"}]}]}}
    )
    bad = write(project / ".relay" / "settings.local.json", '{"hooks": {"BeforeTool": [}}')
    loaded = load_settings(project)
    # A cloned repository cannot switch off the user's hooks by breaking its own file.
    assert [item.file for item in loaded.files] == [str(user)]
    (broken,) = loaded.broken
    assert (broken.file, broken.scope) == (str(bad), "project-local")
    assert (broken.error.line, broken.error.column) == (1, 27)
    assert broken.mentions("BeforeTool") and not broken.mentions("AfterTool")


def test_a_bad_user_file_raises_unless_isolated(project: Path, relay_home: Path) -> None:
    bad = write(relay_home / "settings.json", '{"hooks": ')
    with pytest.raises(SettingsError) as caught:
        load_settings(project)
    assert caught.value.file == str(bad)
    isolated = load_settings(project, isolate={"system", "user", "settings", "project"})
    assert [(item.file, item.scope) for item in isolated.broken] == [(str(bad), "user")]


def test_relay_settings_variable_adds_files_before_settings_options(
    tmp_path: Path, relay_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relay.config.discovery import discover

    first, second, given = (tmp_path / f"{name}.json" for name in ("first", "second", "given"))
    for path in (first, second, given):
        path.write_text("{}")
    monkeypatch.setenv("RELAY_SETTINGS", f"{first}{os.pathsep}{second}")
    found = discover(tmp_path, [given])
    assert [(path.name, scope) for path, scope in found] == [
        ("first.json", "settings"),
        ("second.json", "settings"),
        ("given.json", "settings"),
    ]


def test_a_namespace_policy_is_the_strictest_of_all_files(tmp_path: Path, relay_home: Path) -> None:
    from relay.config.policy import namespace_policy

    project = tmp_path / "p"
    (project / ".relay").mkdir(parents=True)
    (relay_home / "settings.json").write_text(
        json.dumps({"directives": {"deploy": {"from": ["assistant", "terminal"]}}})
    )
    # The project file tries to widen `deploy` (a source the user did not allow) and
    # adds a confirmation: only the narrowing counts.
    (project / ".relay" / "settings.json").write_text(
        json.dumps(
            {
                "directives": {
                    "deploy": {"from": ["terminal", "tool"], "confirm": ["prod"]},
                    "memory": {"confirm": ["forget"]},
                }
            }
        )
    )
    settings = load_settings(project)
    deploy = namespace_policy(settings, "deploy")
    assert deploy.sources == {"terminal"}
    assert deploy.needs_confirmation("prod") and not deploy.needs_confirmation("staging")
    memory = namespace_policy(settings, "memory")
    assert memory.accepts("tool") and memory.needs_confirmation("forget")
    assert namespace_policy(settings, "relay").sources == {"assistant", "terminal", "tool"}


def test_a_bad_directive_source_is_an_error_that_says_where(tmp_path: Path) -> None:
    file = tmp_path / "s.json"
    file.write_text('{\n  "directives": {"deploy": {"from": ["screen"]}}\n}')
    with pytest.raises(SettingsError) as error:
        load_settings_file(file, "user")
    assert f"{file}:2:" in str(error.value)
    assert "directives.deploy.from[0]: invalid enum value 'screen'" in str(error.value)


# --- verdicts remembered by content (validated.py) ------------------------------------------


def test_a_file_validated_before_is_decoded_in_one_pass_with_its_warnings(
    project: Path, relay_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relay.config import validated

    document = one_hook({"command": "guard", "timeout": 5, "statusMessage": "x"})
    write(project / ".relay" / "settings.json", document)
    first = load_settings(project)
    assert [w.message for w in first.warnings] == ["unknown key 'statusMessage' ignored"]
    assert len(list((state_dir() / "settings-verdicts").iterdir())) == 1

    def walk_again(*args: object, **kwargs: object) -> LoadedSettings:
        raise AssertionError("validated in full again")

    monkeypatch.setattr(validated, "usable_settings", walk_again)
    second = load_settings(project)
    assert second.files[0].settings == first.files[0].settings
    assert second.warnings == first.warnings  # with file and line, as first found
    # An edit is new content: validated in full (here: the walk is refused).
    write(project / ".relay" / "settings.json", one_hook({"command": "guard", "timeout": 6}))
    with pytest.raises(AssertionError, match="validated in full again"):
        load_settings(project)


def test_what_the_reader_reshapes_is_never_remembered(project: Path, relay_home: Path) -> None:
    # A "prompt" hook is dropped by the reader; one typed decode would refuse the file.
    hooks = [{"type": "prompt", "prompt": "check"}, {"command": "guard"}]
    write(project / ".relay" / "settings.json", {"hooks": {"Stop": [{"hooks": hooks}]}})
    for _ in range(2):
        loaded = load_settings(project)
        assert [e.command for e in loaded.files[0].settings.hooks["Stop"][0].hooks] == ["guard"]
        assert "hook type 'prompt' is not supported" in loaded.warnings[0].message
    assert not (state_dir() / "settings-verdicts").exists()


def test_a_bad_file_stays_an_error_and_a_damaged_verdict_is_ignored(
    project: Path, relay_home: Path
) -> None:
    path = write(project / ".relay" / "settings.json", one_hook({"command": "guard"}))
    load_settings(project)
    (verdict,) = (state_dir() / "settings-verdicts").iterdir()
    verdict.write_bytes(b"{not json")
    assert load_settings(project).files[0].settings.hooks["BeforeTool"][0].hooks[0].command == (
        "guard"
    )
    path.write_text('{"hooks": {"BeforeTool": [{"hooks": [{"command": ""}]}]}}')
    for _ in range(2):
        (loaded,) = load_settings(project).files
        assert loaded.broken[0].errors[0].message == "command is empty"
        assert loaded.settings.hooks["BeforeTool"][0].hooks == []  # the broken entry left out
    path.write_text('{"hooks": {"BeforeTool": [}}')
    for _ in range(2):
        assert load_settings(project).broken[0].error.message.startswith("invalid JSON")


def test_an_unwritable_state_folder_only_costs_the_full_validation(
    project: Path, relay_home: Path
) -> None:
    write(project / ".relay" / "settings.json", one_hook({"command": "guard"}))
    relay_home.mkdir(exist_ok=True)
    (relay_home / "state").write_text("not a folder")
    for _ in range(2):
        assert load_settings(project).files[0].settings.hooks["BeforeTool"][0].hooks[0].command


def test_folders_follow_each_environment_they_are_given(tmp_path: Path) -> None:
    # A server computes a client's folders once per distinct set of values: a changed
    # value (RELAY_HOME, HOME, XDG_*, RELAY_SYSTEM_SETTINGS) gives the new folder at once.
    home = str(tmp_path / "home")
    answers = []
    for env in [
        {"HOME": home, "RELAY_HOME": "/a"},
        {"HOME": home, "RELAY_HOME": "/b"},
        {"HOME": home, "RELAY_HOME": "/a"},
        {"HOME": home, "XDG_STATE_HOME": "/x", "XDG_CONFIG_HOME": "/y"},
        {"HOME": home},
        {"HOME": home, "RELAY_HOME": "~/r", "RELAY_SYSTEM_SETTINGS": "~/s.json"},
    ]:
        answers.append(
            (str(paths.relay_home(env)), str(state_dir(env)), str(system_settings_path(env)))
        )
    assert answers == [
        ("/a", "/a/state", "/etc/agent-relay/settings.json"),
        ("/b", "/b/state", "/etc/agent-relay/settings.json"),
        ("/a", "/a/state", "/etc/agent-relay/settings.json"),
        ("/y/agent-relay", "/x/agent-relay", "/etc/agent-relay/settings.json"),
        (
            f"{home}/.config/agent-relay",
            f"{home}/.local/state/agent-relay",
            "/etc/agent-relay/settings.json",
        ),
        (f"{home}/r", f"{home}/r/state", f"{home}/s.json"),
    ]
    assert paths.state_file("trust.json", {"HOME": home, "RELAY_HOME": "/b"}) == Path(
        "/b/state/trust.json"
    )
