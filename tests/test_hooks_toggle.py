"""`relay hooks enable/disable`: a minimal textual edit of hooksConfig.disabled, nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from relay.cli.main import cli
from relay.config.editing import JsonText, disable_in_text, enable_in_text, set_hook_disabled
from relay.config.loader import parse_settings
from relay.config.paths import find_project_root
from relay.errors import SettingsError

GUARD_HOOK = {"hooks": {"BeforeTool": [{"hooks": [{"name": "guard", "command": "./g.sh"}]}]}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


def invoke(args: list[str]) -> Any:
    return CliRunner().invoke(cli, args)


def disable(text: str, name: str = "guard") -> str:
    after = disable_in_text(text, name, file="settings.json")
    parse_settings(after.encode(), file="settings.json", scope="user")  # still valid
    return after


def enable(text: str, name: str = "guard") -> str:
    after = enable_in_text(text, name, file="settings.json")
    parse_settings(after.encode(), file="settings.json", scope="user")
    return after


# --- the text edit, layout by layout -------------------------------------------------------


def test_two_spaces_without_hooks_config_adds_it_at_the_end() -> None:
    before = '{\n  "hooks": {\n    "Stop": []\n  }\n}\n'
    assert disable(before) == (
        '{\n  "hooks": {\n    "Stop": []\n  },\n'
        '  "hooksConfig": {\n    "disabled": [\n      "guard"\n    ]\n  }\n}\n'
    )


def test_four_spaces_with_hooks_config_but_no_disabled() -> None:
    before = '{\n    "hooksConfig": {\n        "enabled": true\n    },\n    "hooks": {}\n}\n'
    assert disable(before) == (
        '{\n    "hooksConfig": {\n        "enabled": true,\n'
        '        "disabled": [\n            "guard"\n        ]\n    },\n    "hooks": {}\n}\n'
    )


def test_tabs_with_a_disabled_list_appends_to_it() -> None:
    before = '{\n\t"hooksConfig": {\n\t\t"disabled": [\n\t\t\t"lint"\n\t\t]\n\t}\n}\n'
    after = disable(before)
    assert after == (
        '{\n\t"hooksConfig": {\n\t\t"disabled": [\n\t\t\t"lint",\n\t\t\t"guard"\n\t\t]\n\t}\n}\n'
    )
    assert enable(after) == before


def test_compact_one_line_stays_compact() -> None:
    before = '{"hooks":{},"hooksConfig":{"enabled":true}}'
    after = disable(before)
    assert after == '{"hooks":{},"hooksConfig":{"enabled":true,"disabled":["guard"]}}'
    assert enable(after) == before  # no empty list is left behind


def test_one_line_with_spaces_and_an_empty_list() -> None:
    before = '{"hooksConfig": {"disabled": []}, "hooks": {}}\n'
    after = disable(before)
    assert after == '{"hooksConfig": {"disabled": ["guard"]}, "hooks": {}}\n'
    assert enable(after) == '{"hooks": {}}\n'  # an emptied hooksConfig goes


def test_keys_in_unusual_order_and_inline_members_are_kept() -> None:
    before = (
        "{\n"
        '  "session": {"idleSeconds": 5},\n'
        '  "hooksConfig": {"disabled": ["a", "b"], "enabled": true},\n'
        '  "$schema": "https://example.com/relay.json",\n'
        '  "hooks": {"Stop": [{"hooks": [{"command": "x"}]}]}\n'
        "}"
    )
    after = disable(before)
    assert after == before.replace('["a", "b"]', '["a", "b", "guard"]')
    assert enable(after) == before
    # Removing the first and the middle element keeps the others' layout.
    assert enable(before, "a") == before.replace('["a", "b"]', '["b"]')
    assert enable(after, "b") == before.replace('["a", "b"]', '["a", "guard"]')


def test_unicode_names_and_content_survive() -> None:
    before = (
        '{\n   "hooks": {"Stop": [{"hooks": [{"name": "vérifier ✓", "command": "echo é"}]}]},\n'
        '   "hooksConfig": {\n      "disabled": [\n         "ancien"\n      ]\n   }\n}'
    )
    after = disable(before, "vérifier ✓")
    assert after == before.replace('"ancien"\n', '"ancien",\n         "vérifier ✓"\n')
    assert enable(after, "vérifier ✓") == before


def test_removing_the_last_name_leaves_no_empty_key() -> None:
    before = '{\n  "hooksConfig": {\n    "disabled": [\n      "guard"\n    ]\n  }\n}\n'
    assert enable(before) == "{}\n"
    # And disabling again restores the exact original text.
    assert disable(enable(before)) == before
    # hooksConfig keeps its other members; the file its other keys, as they were written.
    kept = '{\n  "hooks": {},\n  "hooksConfig": {\n    "enabled": true,\n    "disabled": ["guard"]\n  }\n}\n'
    assert enable(kept) == '{\n  "hooks": {},\n  "hooksConfig": {\n    "enabled": true\n  }\n}\n'
    without = '{\n  "hooks": {\n    "Stop": []\n  }\n}\n'
    assert enable(disable(without)) == without


def test_an_empty_hooks_config_in_a_multi_line_file_opens_up() -> None:
    before = '{\n  "hooksConfig": {},\n  "memory": {"backend": "sqlite"}\n}\n'
    assert disable(before) == (
        '{\n  "hooksConfig": {\n    "disabled": [\n      "guard"\n    ]\n  },\n'
        '  "memory": {"backend": "sqlite"}\n}\n'
    )


def test_windows_line_endings_are_kept() -> None:
    before = '{\r\n  "hooksConfig": {\r\n    "disabled": [\r\n      "a"\r\n    ]\r\n  }\r\n}\r\n'
    after = disable(before)
    assert after == before.replace('"a"\r\n', '"a",\r\n      "guard"\r\n')
    assert enable(after) == before


def test_a_byte_order_mark_is_kept() -> None:
    before = '\ufeff{"hooksConfig": {"disabled": []}}'
    assert disable(before) == '\ufeff{"hooksConfig": {"disabled": ["guard"]}}'


@pytest.mark.parametrize("before", ["", "  \n", "{}", "{}\n"])
def test_an_empty_document_gets_the_standard_layout(before: str) -> None:
    assert disable(before) == (
        '{\n  "hooksConfig": {\n    "disabled": [\n      "guard"\n    ]\n  }\n}'
        + "\n" * (before != "{}")
    )


def test_disabling_twice_keeps_one_entry_and_enabling_removes_duplicates() -> None:
    once = disable('{"hooksConfig": {"disabled": []}}')
    assert disable(once) == once
    doubled = '{"hooksConfig": {"disabled": ["guard", "x", "guard"]}}'
    assert enable(doubled) == '{"hooksConfig": {"disabled": ["x"]}}'


def test_enabling_what_is_not_disabled_changes_nothing() -> None:
    for text in [
        "",
        "{}",
        '{"hooksConfig": {"enabled": false}}',
        '{"hooksConfig": {"disabled": ["x"]}}',
    ]:
        assert enable(text) == text


@pytest.mark.parametrize(
    ("text", "path", "line", "column"),
    [
        ("[]", None, 1, 1),
        ('{\n  "hooksConfig": []\n}', "hooksConfig", 2, 3),
        ('{"hooksConfig": {"disabled": "guard"}}', "hooksConfig.disabled", 1, 18),
    ],
)
def test_a_structure_that_cannot_hold_the_name_is_refused(
    text: str, path: str | None, line: int, column: int
) -> None:
    with pytest.raises(SettingsError) as caught:
        disable_in_text(text, "guard", file="settings.json")
    assert (caught.value.path, caught.value.line, caught.value.column) == (path, line, column)
    assert caught.value.message.startswith("cannot edit")


def test_malformed_json_is_refused_with_its_position() -> None:
    with pytest.raises(SettingsError) as caught:
        disable_in_text('{\n  "hooks": {,}\n}', "guard", file="settings.json")
    assert (caught.value.line, caught.value.column) == (2, 13)


def test_json_text_edits_nested_members_and_values() -> None:
    document = JsonText('{\n  "a": {\n    "b": 1\n  },\n  "c": [1, 2]\n}', file="x")
    document.insert(("a",), "d", {"e": [True]})
    document.append(("c",), {"f": None})
    document.replace(("a", "b"), "two")
    document.remove(("c", 0))
    assert document.text == (
        '{\n  "a": {\n    "b": "two",\n    "d": {\n      "e": [\n        true\n      ]\n    }\n'
        '  },\n  "c": [2, {"f": null}]\n}'
    )
    assert document.value == {"a": {"b": "two", "d": {"e": [True]}}, "c": [2, {"f": None}]}


# --- the files and the command -------------------------------------------------------------


def test_disable_in_a_project_creates_relay_folder_and_file(project: Path) -> None:
    result = invoke(["hooks", "disable", "guard", "--force", "--cwd", str(project)])
    assert result.exit_code == 0, result.output
    settings = project / ".relay" / "settings.local.json"  # personal unless --shared
    assert result.stdout == f"disabled guard in {settings}\n"
    assert settings.read_text() == (
        '{\n  "hooksConfig": {\n    "disabled": [\n      "guard"\n    ]\n  }\n}\n'
    )
    assert "no hook named 'guard'" in result.stderr


def _lonely(tmp_path: Path) -> Path:
    """A folder outside any project, or a skip when the temporary folder is inside one
    (a test run from within a project, with its base temp there): never run a command
    that could write into a project above it. A shared /tmp is no project, even while
    Codex's sandbox has its empty /tmp/.git there (find_project_root)."""
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    if find_project_root(lonely) is not None:
        pytest.skip(f"the temporary folder sits inside a project: {find_project_root(lonely)}")
    return lonely


def test_outside_a_project_the_user_file_is_the_default(tmp_path: Path, relay_home: Path) -> None:
    lonely = _lonely(tmp_path)
    result = invoke(["hooks", "disable", "guard", "--force", "--cwd", str(lonely)])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"disabled guard in {relay_home / 'settings.json'}\n"


@pytest.mark.parametrize(
    ("scope", "relative"),
    [("project", ".relay/settings.json"), ("local", ".relay/settings.local.json")],
)
def test_scopes_pick_the_file(project: Path, scope: str, relative: str) -> None:
    command = ["hooks", "disable", "guard", "--force", "--scope", scope, "--cwd", str(project)]
    result = invoke(command)
    assert result.exit_code == 0
    assert (project / relative).is_file()
    assert str(project / relative) in result.stdout


def test_user_scope_edits_relay_home_in_place(project: Path, relay_home: Path) -> None:
    settings = relay_home / "settings.json"
    before = json.dumps(GUARD_HOOK, indent=4) + "\n"
    settings.write_text(before)
    result = invoke(["hooks", "disable", "guard", "--scope", "user", "--cwd", str(project)])
    assert result.exit_code == 0
    assert result.stderr == ""  # guard is a known hook
    assert settings.read_text() == before.removesuffix("\n}\n") + (
        ',\n    "hooksConfig": {\n        "disabled": [\n            "guard"\n        ]\n    }\n}\n'
    )
    again = invoke(["hooks", "disable", "guard", "--scope", "user", "--cwd", str(project)])
    assert again.stdout == f"guard is already disabled in {settings}; nothing changed\n"
    enabled = invoke(["hooks", "enable", "guard", "--scope", "user", "--cwd", str(project)])
    assert enabled.stdout == f"enabled guard in {settings}\n"
    assert settings.read_text() == before  # no empty hooksConfig left behind
    nothing = invoke(["hooks", "enable", "guard", "--scope", "user", "--cwd", str(project)])
    assert nothing.exit_code == 0
    assert nothing.stdout == f"guard is not disabled in {settings}; nothing changed\n"


def test_an_unknown_name_is_refused_with_a_suggestion(project: Path, relay_home: Path) -> None:
    user = relay_home / "settings.json"
    user.write_text(json.dumps(GUARD_HOOK))
    before = user.read_text()
    result = invoke(["hooks", "disable", "gaurd", "--cwd", str(project)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        "relay: error: no hook named 'gaurd' in the settings that apply here "
        "(did you mean 'guard'?); nothing changed (relay hooks list shows the names; "
        "--force disables it anyway)\n"
    )
    assert not (project / ".relay").exists() and user.read_text() == before
    as_json = invoke(["hooks", "disable", "gaurd", "--json", "--cwd", str(project)])
    assert as_json.exit_code == 1
    answer = json.loads(as_json.stdout)
    assert answer["action"] == "unknown" and answer["suggestion"] == "guard"
    forced = invoke(["hooks", "disable", "gaurd", "--force", "--cwd", str(project)])
    assert forced.exit_code == 0
    assert "warning: no hook named 'gaurd'" in forced.stderr


def test_enable_and_disable_answer_in_json(project: Path, relay_home: Path) -> None:
    (relay_home / "settings.json").write_text(json.dumps(GUARD_HOOK))
    done = invoke(["hooks", "disable", "guard", "--json", "--scope", "user", "--cwd", str(project)])
    assert done.exit_code == 0
    answer = json.loads(done.stdout)
    assert answer["action"] == "disabled" and answer["known"] is True
    assert answer["file"] == str(relay_home / "settings.json")
    again = invoke(["hooks", "enable", "guard", "--json", "--scope", "user", "--cwd", str(project)])
    assert json.loads(again.stdout)["action"] == "enabled"


def test_enabling_tells_which_other_file_still_disables(project: Path, relay_home: Path) -> None:
    user = relay_home / "settings.json"
    user.write_text(json.dumps({**GUARD_HOOK, "hooksConfig": {"disabled": ["guard"]}}))
    local = project / ".relay" / "settings.local.json"
    local.parent.mkdir()
    local.write_text('{"hooksConfig": {"disabled": ["guard"]}}')
    result = invoke(["hooks", "enable", "guard", "--scope", "local", "--cwd", str(project)])
    assert result.exit_code == 0
    assert result.stdout == f"enabled guard in {local}\n"
    assert result.stderr == (
        f"relay: warning: guard is still disabled in {user} "
        "(relay hooks enable guard --scope user)\n"
    )
    assert local.read_text() == "{}"


def test_invalid_json_is_refused_and_left_alone(project: Path) -> None:
    settings = project / ".relay" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{\n  "hooksConfig": {"disabled": [}\n}\n')
    result = invoke(["hooks", "disable", "guard", "--shared", "--cwd", str(project)])
    assert result.exit_code == 1
    assert f"{settings}:2:32: invalid JSON" in result.stderr
    assert settings.read_text() == '{\n  "hooksConfig": {"disabled": [}\n}\n'


def test_project_scope_outside_a_project_is_an_error(tmp_path: Path) -> None:
    lonely = _lonely(tmp_path)
    result = invoke(["hooks", "disable", "guard", "--scope", "project", "--cwd", str(lonely)])
    assert result.exit_code == 1 and "no project here" in result.stderr


def test_a_symlinked_settings_file_stays_a_link(project: Path, tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "settings.json"
    real.parent.mkdir()
    real.write_text("{}\n")
    link = project / ".relay" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(real)
    result = set_hook_disabled("guard", True, cwd=project, force=True, shared=True)
    assert result.action == "disabled" and result.file == link and not result.created
    assert link.is_symlink()
    assert json.loads(real.read_text()) == {"hooksConfig": {"disabled": ["guard"]}}


def test_the_disabled_hook_stops_running(project: Path, relay_home: Path) -> None:
    hooks = {"SessionStart": [{"hooks": [{"name": "hello", "command": "echo hi"}]}]}
    (relay_home / "settings.json").write_text(json.dumps({"hooks": hooks}, indent=2))
    run = ["hooks", "run", "SessionStart", "--cwd", str(project)]
    assert json.loads(invoke(run).stdout)["inject"] == "hi"
    assert invoke(["hooks", "disable", "hello", "--scope", "user"]).exit_code == 0
    assert json.loads(invoke(run).stdout)["inject"] is None
    assert invoke(["hooks", "enable", "hello", "--scope", "user"]).exit_code == 0
    assert json.loads(invoke(run).stdout)["inject"] == "hi"


def test_installed_command_toggles(project: Path, relay_home: Path) -> None:
    relay = shutil.which("relay", path=str(Path(sys.executable).parent))
    assert relay is not None
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    settings = project / ".relay" / "settings.local.json"
    done = subprocess.run(
        [relay, "hooks", "disable", "guard", "--force", "--scope", "local", "--cwd", str(project)],
        capture_output=True,
        check=False,
        env=env,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == f"disabled guard in {settings}\n"
    assert json.loads(settings.read_text()) == {"hooksConfig": {"disabled": ["guard"]}}
    done = subprocess.run(
        [relay, "hooks", "enable", "guard", "--scope", "local", "--cwd", str(project)],
        capture_output=True,
        check=False,
        env=env,
        timeout=30,
    )
    assert done.returncode == 0
    assert json.loads(settings.read_text()) == {}


def test_file_modes_are_kept_and_new_files_follow_the_umask(project: Path) -> None:
    created = set_hook_disabled("guard", True, scope="local", cwd=project, force=True)
    assert created.created
    umask = os.umask(0)
    os.umask(umask)
    assert created.file.stat().st_mode & 0o777 == 0o666 & ~umask
    created.file.chmod(0o600)
    set_hook_disabled("other", True, scope="local", cwd=project, force=True)
    assert created.file.stat().st_mode & 0o777 == 0o600


def test_disabling_a_user_hook_in_a_project_file_warns(tmp_path: Path, relay_home: Path) -> None:
    """Project settings cannot switch off user hooks (the engine ignores it): say so."""
    from click.testing import CliRunner

    from relay.cli.main import cli

    project = tmp_path / "guarded"
    (project / ".git").mkdir(parents=True)
    (relay_home / "settings.json").write_text(
        '{"hooks": {"BeforeTool": [{"hooks": [{"command": "true", "name": "guard"}]}]}}'
    )
    result = CliRunner().invoke(
        cli, ["hooks", "disable", "guard", "--scope", "project", "--cwd", str(project)]
    )
    assert result.exit_code == 0
    assert "project settings cannot turn off" in result.stderr and "--scope user" in result.stderr


# --- personal by default -------------------------------------------------------------------


def test_a_project_hook_is_switched_off_in_the_personal_file_unless_shared(project: Path) -> None:
    shared = project / ".relay" / "settings.json"
    shared.parent.mkdir()
    hooks = {"SessionStart": [{"hooks": [{"name": "hello", "command": "echo hi"}]}]}
    shared.write_text(json.dumps({"hooks": hooks}, indent=2) + "\n")
    committed = shared.read_bytes()
    assert invoke(["trust", "--yes", "--cwd", str(project)]).exit_code == 0
    run = ["hooks", "run", "SessionStart", "--cwd", str(project)]
    assert json.loads(invoke(run).stdout)["inject"] == "hi"

    local = project / ".relay" / "settings.local.json"
    off = invoke(["hooks", "disable", "hello", "--cwd", str(project)])
    assert (off.exit_code, off.stdout, off.stderr) == (0, f"disabled hello in {local}\n", "")
    assert shared.read_bytes() == committed  # the team's file is not touched
    assert json.loads(invoke(run).stdout)["inject"] is None
    on = invoke(["hooks", "enable", "hello", "--cwd", str(project)])
    assert on.stdout == f"enabled hello in {local}\n"
    assert local.read_text() == "{}\n"  # no empty list or hooksConfig left
    assert json.loads(invoke(run).stdout)["inject"] == "hi"

    everyone = invoke(["hooks", "disable", "hello", "--shared", "--cwd", str(project)])
    assert everyone.stdout == f"disabled hello in {shared}\n"
    assert json.loads(shared.read_text())["hooksConfig"] == {"disabled": ["hello"]}
    mine = invoke(["hooks", "enable", "hello", "--cwd", str(project)])
    assert mine.stdout == f"hello is not disabled in {local}; nothing changed\n"
    assert mine.stderr == (
        f"relay: warning: hello is still disabled in {shared} "
        "(the project's shared file: relay hooks enable hello --shared)\n"
    )
    assert invoke(["hooks", "enable", "hello", "--shared", "--cwd", str(project)]).exit_code == 0
    assert shared.read_bytes() == committed


def test_a_user_hook_is_switched_off_in_the_user_file_inside_a_project(
    project: Path, relay_home: Path
) -> None:
    user = relay_home / "settings.json"
    user.write_text(json.dumps(GUARD_HOOK))
    result = invoke(["hooks", "disable", "guard", "--cwd", str(project)])
    assert (result.exit_code, result.stderr) == (0, "")  # no "project settings cannot" warning
    assert result.stdout == f"disabled guard in {user}\n"
    assert not (project / ".relay").exists()


def test_shared_goes_with_no_other_scope(project: Path) -> None:
    command = ["hooks", "disable", "guard", "--force", "--shared", "--scope", "user"]
    result = invoke([*command, "--cwd", str(project)])
    assert result.exit_code == 1
    assert "--shared is the project's shared file" in result.stderr
