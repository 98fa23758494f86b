"""Convert the hooks of Claude Code and Gemini CLI settings files into relay settings.

Claude Code hooks keep their Claude event names, so they keep running in the claude dialect
(same input field names, same reading of their answers). Gemini CLI already uses relay's
canonical event names; its timeouts are milliseconds and become seconds. Whatever cannot be
carried over is left out and named in the report, never silently dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from relay.config.editing import (
    JsonText,
    disable_in_text,
    new_settings_text,
    read_settings_text,
    write_settings_text,
)
from relay.config.loader import (
    check_settings,
    decode_document,
    is_empty_document,
    render_path,
    validate_matcher,
)
from relay.config.model import (
    MILLISECOND_SUSPECT,
    HookEntry,
    HookGroup,
    HooksConfig,
    Settings,
)
from relay.config.paths import PROJECT_DIR_NAME, find_project_root
from relay.errors import RelayError, SettingsError
from relay.protocol.dialects import known_event_names

Agent = Literal["claude", "gemini"]
AGENT_NAMES: dict[Agent, str] = {"claude": "Claude Code", "gemini": "Gemini CLI"}

CLAUDE_FILES = (".claude/settings.json", ".claude/settings.local.json")
GEMINI_FILES = (".gemini/settings.json",)

GEMINI_EVENTS: frozenset[str] = frozenset(
    {
        "BeforeTool",
        "AfterTool",
        "BeforeAgent",
        "AfterAgent",
        "BeforeModel",
        "AfterModel",
        "BeforeToolSelection",
        "SessionStart",
        "SessionEnd",
        "PreCompress",
        "Notification",
    }
)
_TOOL_EVENTS = frozenset({"BeforeTool", "AfterTool"})
_PLAIN_NAMES = re.compile(r"[A-Za-z0-9_\- ,|]*")
"""A matcher that relay reads as a list of exact names (spec/protocol.md §7.4)."""

_CLAUDE_DROPPED_KEYS: dict[str, str] = {
    "async": "Claude Code runs it in the background; relay runs it like any hook and waits",
    "statusMessage": "relay shows no status message while a hook runs",
    "once": "relay has no run-once hooks",
}
_GEMINI_CONFIG_KEYS = frozenset({"enabled", "disabled", "notifications"})


class ImportSourceError(RelayError):
    """No settings file to import from: names every path tried."""

    def __init__(self, agent: Agent, tried: Sequence[Path]) -> None:
        self.agent = agent
        self.tried = [str(path) for path in tried]
        super().__init__(
            f"no {AGENT_NAMES[agent]} settings file found; tried: {', '.join(self.tried)}"
        )


class ImportResult(msgspec.Struct, kw_only=True):
    """Hooks converted from another agent's settings files, and what could not be carried."""

    agent: Agent
    files: list[str]
    """The files read, in merge order."""
    settings: Settings
    report: list[str]
    """One line per thing left out, changed or worth knowing, in file order."""

    @property
    def hook_count(self) -> int:
        """How many hooks were converted."""
        return sum(len(group.hooks) for groups in self.settings.hooks.values() for group in groups)

    def settings_text(self) -> str:
        """The converted settings as a relay settings file: 2-space indent, trailing newline."""
        return new_settings_text(settings_document(self.settings))


class MergeResult(msgspec.Struct, kw_only=True):
    """What merging imported hooks into a relay settings file did."""

    file: str
    text: str
    """The file's new text."""
    created: bool = False
    added: int = 0
    """Groups appended."""
    skipped: int = 0
    """Groups already present identically."""
    report: list[str] = msgspec.field(default_factory=list)


def settings_document(settings: Settings) -> dict[str, Any]:
    """The JSON object of a settings file holding these settings, without empty sections."""
    document: dict[str, Any] = msgspec.to_builtins(settings)
    # omit_defaults leaves out default values, not sections built by a default factory.
    return {key: value for key, value in document.items() if value not in ({}, [])}


def source_files(agent: Agent, root: Path) -> list[Path]:
    """The settings files an agent reads in a project, in merge order (existing or not)."""
    names = CLAUDE_FILES if agent == "claude" else GEMINI_FILES
    return [root / name for name in names]


def import_from(
    agent: Agent, *, cwd: Path | None = None, paths: Sequence[Path] = ()
) -> ImportResult:
    """Read an agent's settings files (the given ones, else the project's) and convert them."""
    start = Path.cwd() if cwd is None else cwd
    if paths:
        missing = [path for path in paths if not path.is_file()]
        if missing:
            raise ImportSourceError(agent, missing)
        found = list(paths)
    else:
        root = find_project_root(start) or start
        candidates = source_files(agent, root)
        found = [path for path in candidates if path.is_file()]
        if not found:
            raise ImportSourceError(agent, candidates)
    documents = [(str(path), _read_source(path)) for path in found]
    return convert(agent, documents)


def convert(agent: Agent, documents: Sequence[tuple[str, Any]]) -> ImportResult:
    """Convert decoded settings documents of one agent, merged in the order given."""
    converter = _Converter(agent)
    for file, document in documents:
        converter.read(file, document)
    return converter.result([file for file, _ in documents])


def import_target(cwd: Path) -> Path:
    """The relay settings file that imported hooks are written to: the project file."""
    root = find_project_root(cwd) or cwd
    return root / PROJECT_DIR_NAME / "settings.json"


def merge_into_file(imported: Settings, path: Path) -> MergeResult:
    """Add the imported hooks to a relay settings file, in place, keeping what it has."""
    before = read_settings_text(path)
    merged = merge_into_text(before or "", imported, file=str(path))
    if merged.text != (before or ""):
        write_settings_text(path, merged.text)
        merged.created = before is None
    return merged


def merge_into_text(text: str, imported: Settings, *, file: str) -> MergeResult:
    """The settings text with the imported groups appended per event (a group already present
    identically is skipped), disabled names added and `enabled: false` carried over."""
    if not text.strip():
        fresh = settings_document(imported)
        added = sum(len(groups) for groups in imported.hooks.values())
        return MergeResult(file=file, text=new_settings_text(fresh) if fresh else text, added=added)
    checked = check_settings(text.encode(), file=file, scope="project")
    if checked.settings is None:
        # Refuse to touch a file relay cannot read: its own error says where to look.
        raise checked.errors[0]
    existing = checked.settings
    document = JsonText(text, file=file)
    if not isinstance(document.value, dict):
        raise SettingsError("cannot edit: expected a JSON object", file=file, line=1, column=1)
    result = MergeResult(file=file, text=text)
    for event, groups in imported.hooks.items():
        present = list(existing.hooks.get(event, []))
        for group in groups:
            if group in present:
                result.skipped += 1
                where = _describe_group(event, group.matcher)
                result.report.append(f"{where}: the same group is already in {file}; skipped")
                continue
            _append_group(document, event, group)
            present.append(group)
            result.added += 1
    text = document.text
    for name in imported.hooksConfig.disabled:
        text = disable_in_text(text, name, file=file)
    if not imported.hooksConfig.enabled and existing.hooksConfig.enabled:
        document = JsonText(text, file=file)
        if document.has(("hooksConfig", "enabled")):
            document.replace(("hooksConfig", "enabled"), False)
        elif document.has(("hooksConfig",)):
            document.insert(("hooksConfig",), "enabled", False)
        else:
            document.insert((), "hooksConfig", {"enabled": False})
        text = document.text
    after = check_settings(text.encode(), file=file, scope="project")
    if after.errors:  # the file was valid and every value was checked: this is a bug
        raise RelayError(f"internal error: the merge would break {file}: {after.errors[0]}")
    result.text = text
    return result


def _append_group(document: JsonText, event: str, group: HookGroup) -> None:
    value = msgspec.to_builtins(group)
    if not document.has(("hooks",)):
        document.insert((), "hooks", {event: [value]})
    elif not document.has(("hooks", event)):
        document.insert(("hooks",), event, [value])
    else:
        document.append(("hooks", event), value)


def _read_source(path: Path) -> Any:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"cannot read: {exc.strerror or exc}", file=str(path)) from None
    _, document = decode_document(data, file=str(path))
    return {} if is_empty_document(document) else document


def _describe_group(event: str, matcher: object) -> str:
    return f"{event}[{matcher}]" if matcher not in (None, "", "*") else event


_RUNNERS = re.compile(
    r"(ba|z|da)?sh|python[0-9.]*|node|deno|bun|npx|uv|uvx|perl|ruby|env|exec|-\S*|\$\{?\w+\}?"
)


def _readable_name(label: str, command: str) -> str:
    """A name for a hook that has none: its event and its program, `pre-tool-use-guard`."""
    event = label.split("[", 1)[0]
    words = command.replace('"', " ").replace("'", " ").split()
    program = next(
        (w for w in words if "=" not in w and not _RUNNERS.fullmatch(w.rsplit("/", 1)[-1])),
        words[0] if words else "hook",
    )
    stem = re.sub(r"\.[A-Za-z0-9]+$", "", program.rstrip("/").rsplit("/", 1)[-1])
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-") or "hook"
    kebab = re.sub(r"(?<!^)(?=[A-Z])", "-", event).lower()
    return f"{kebab}-{slug}"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


def _whole(value: float) -> float:
    """5.0 as 5, so a converted timeout reads as written."""
    return int(value) if float(value).is_integer() else value


class _Converter:
    """Collects converted hooks and report lines across the files of one agent."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.hooks: dict[str, list[HookGroup]] = {}
        self.enabled = True
        self.disabled: list[str] = []
        self.report: list[str] = []
        self._untimed = 0
        self._plain_tool_matchers: list[str] = []
        self._converted_timeouts: list[str] = []
        self._names: dict[str, tuple[str, str]] = {}

    def read(self, file: str, document: Any) -> None:
        if not isinstance(document, dict):
            raise SettingsError("expected a JSON object", file=file, line=1, column=1)
        if self.agent == "claude":
            self._read_claude(file, document)
        else:
            self._read_gemini(file, document)

    def result(self, files: list[str]) -> ImportResult:
        if self.agent == "claude" and self._untimed:
            self.report.append(
                f"{self._untimed} hook(s) without a timeout get relay's default of 60 seconds; "
                "add a timeout if one needs longer"
            )
        if self._converted_timeouts:
            self.report.append(
                "timeouts converted from milliseconds (Gemini CLI) to seconds (relay): "
                + ", ".join(self._converted_timeouts)
            )
        if self._plain_tool_matchers:
            listed = ", ".join(repr(matcher) for matcher in self._plain_tool_matchers)
            self.report.append(
                f"matchers {listed}: Gemini CLI searches tool names with them as regular "
                "expressions, relay reads a plain list of names as exact names; write a regular "
                "expression (such as '.*read.*') where a part of a name was meant"
            )
        settings = Settings(
            hooks=self.hooks, hooksConfig=HooksConfig(enabled=self.enabled, disabled=self.disabled)
        )
        checked = check_settings(msgspec.json.encode(settings), file="<imported>", scope="project")
        if checked.errors:  # every value was checked on the way in: this is a bug
            raise RelayError(f"internal error: imported settings are invalid: {checked.errors[0]}")
        return ImportResult(agent=self.agent, files=files, settings=settings, report=self.report)

    # --- Claude Code -----------------------------------------------------------------------

    def _read_claude(self, file: str, document: dict[str, Any]) -> None:
        if document.get("disableAllHooks") is True:
            self.enabled = False
            self.report.append(
                f"{file}: disableAllHooks: true became hooksConfig.enabled: false "
                "(no hook runs while it is set)"
            )
        self._read_events(file, document.get("hooks"), ("hooks",), skip=frozenset())
        self._note_other_keys(file, document, {"hooks", "disableAllHooks"})

    # --- Gemini CLI ------------------------------------------------------------------------

    def _read_gemini(self, file: str, document: dict[str, Any]) -> None:
        hooks = document.get("hooks")
        # Two layouts: {"hooks": {Event: [...]}, "hooksConfig": {...}}, and the older one with
        # the switches inside "hooks" itself: {"hooks": {"enabled": …, "disabled": […], Event: […]}}.
        if isinstance(hooks, dict):
            self._read_gemini_config(file, hooks, ("hooks",))
        config = document.get("hooksConfig")
        if isinstance(config, dict):
            self._read_gemini_config(file, config, ("hooksConfig",))
            unknown = [key for key in config if key not in _GEMINI_CONFIG_KEYS]
            for key in unknown:
                self.report.append(f"{file}: hooksConfig.{key}: unknown setting; left out")
        elif config is not None:
            self.report.append(f"{file}: hooksConfig: expected an object; left out")
        tools = document.get("tools")
        if isinstance(tools, dict) and tools.get("enableHooks") is False:
            self.enabled = False
            self.report.append(
                f"{file}: tools.enableHooks: false became hooksConfig.enabled: false"
            )
        self._read_events(file, hooks, ("hooks",), skip=_GEMINI_CONFIG_KEYS)
        self._note_other_keys(file, document, {"hooks", "hooksConfig", "tools"})

    def _read_gemini_config(self, file: str, config: dict[str, Any], path: tuple[str]) -> None:
        where = f"{file}: {render_path(path)}"
        enabled = config.get("enabled")
        if enabled is False:
            self.enabled = False
            self.report.append(f"{where}.enabled: false became hooksConfig.enabled: false")
        elif enabled is not None and enabled is not True:
            self.report.append(f"{where}.enabled: expected true or false; left out")
        disabled = config.get("disabled")
        if isinstance(disabled, list):
            for name in disabled:
                if isinstance(name, str):
                    if name not in self.disabled:
                        self.disabled.append(name)
                else:
                    self.report.append(f"{where}.disabled: {name!r} is not a hook name; left out")
        elif disabled is not None:
            self.report.append(f"{where}.disabled: expected a list of hook names; left out")
        if "notifications" in config:
            self.report.append(f"{where}.notifications: relay has no hook notifications; left out")

    # --- both ------------------------------------------------------------------------------

    def _read_events(
        self, file: str, hooks: Any, path: tuple[str], *, skip: frozenset[str]
    ) -> None:
        if hooks is None:
            return
        if not isinstance(hooks, dict):
            self.report.append(f"{file}: hooks: expected an object; nothing imported from it")
            return
        known = GEMINI_EVENTS if self.agent == "gemini" else frozenset(known_event_names())
        for event, groups in hooks.items():
            if event in skip:
                continue
            if event not in known:
                self._note(
                    file,
                    (*path, event),
                    event,
                    f"not a {AGENT_NAMES[self.agent]} event relay knows; its hooks were left out",
                )
                continue
            if not isinstance(groups, list):
                self._note(file, (*path, event), event, "expected a list of groups; left out")
                continue
            for index, group in enumerate(groups):
                converted = self._group(file, event, group, (*path, event, index))
                if converted is None:
                    continue
                collected = self.hooks.setdefault(event, [])
                if converted in collected:
                    label = _describe_group(event, converted.matcher)
                    self._note(file, (*path, event, index), label, "same group seen before; once")
                else:
                    collected.append(converted)

    def _group(
        self, file: str, event: str, group: Any, path: tuple[str | int, ...]
    ) -> HookGroup | None:
        if not isinstance(group, dict):
            self._note(file, path, event, "expected an object; left out")
            return None
        matcher = group.get("matcher")
        label = _describe_group(event, matcher)
        if matcher is not None and not isinstance(matcher, str):
            self._note(file, path, label, "matcher is not a string; group left out")
            return None
        if matcher is not None:
            problem = validate_matcher(matcher)
            if problem is not None:
                self._note(file, path, label, f"{problem}; group left out")
                return None
            if (
                self.agent == "gemini"
                and event in _TOOL_EVENTS
                and matcher not in ("", "*", *self._plain_tool_matchers)
                and _PLAIN_NAMES.fullmatch(matcher)
            ):
                self._plain_tool_matchers.append(matcher)
        group_keys = (
            {"matcher", "hooks", "sequential"} if self.agent == "gemini" else {"matcher", "hooks"}
        )
        for key in group:
            if key not in group_keys:
                self._note(file, (*path, key), label, "no relay equivalent; left out")
        entries = group.get("hooks")
        if not isinstance(entries, list):
            self._note(file, path, label, "no list of hooks; group left out")
            return None
        converted = [
            entry
            for index, hook in enumerate(entries)
            if (entry := self._hook(file, label, hook, (*path, "hooks", index))) is not None
        ]
        if not converted:
            return None
        sequential = self.agent == "gemini" and group.get("sequential") is True
        return HookGroup(matcher=matcher, sequential=sequential, hooks=converted)

    def _hook(
        self, file: str, label: str, hook: Any, path: tuple[str | int, ...]
    ) -> HookEntry | None:
        if not isinstance(hook, dict):
            self._note(file, path, label, "expected an object; left out")
            return None
        kind = hook.get("type", "command")
        if kind != "command":
            what = hook.get("prompt") or hook.get("url") or hook.get("command") or ""
            shown = f" {str(what)[:60]!r}" if what else ""
            self._note(
                file,
                path,
                label,
                f"{kind!r} hook{shown} cannot be carried over (relay runs command hooks only); "
                "left out",
            )
            return None
        command = hook.get("command")
        if not isinstance(command, str) or not command.strip():
            self._note(file, path, label, "no command; left out")
            return None
        fields: dict[str, Any] = {"command": command}
        kept = {"type", "command", "timeout"}
        if self.agent == "gemini":
            kept |= {"name", "description"}
            for key in ("name", "description"):
                if isinstance(hook.get(key), str):
                    fields[key] = hook[key]
                elif key in hook:
                    self._note(file, (*path, key), label, "not a string; left out")
        timeout = self._timeout(file, label, hook, path)
        if timeout is not None:
            fields["timeout"] = timeout
        for key in hook:
            if key not in kept:
                why = _CLAUDE_DROPPED_KEYS.get(key, "no relay equivalent")
                self._note(file, (*path, key), label, f"{why}; left out")
        if "name" not in fields:
            fields["name"] = self._unique(_readable_name(label, command), (label, command))
        return HookEntry(**fields)

    def _unique(self, name: str, key: tuple[str, str]) -> str:
        """`name`, or `name-2`, `name-3`… when another hook of this import has it (the same
        hook in two files keeps one name, so the copies still merge as one)."""
        candidate, number = name, 1
        while self._names.setdefault(candidate, key) != key:
            number += 1
            candidate = f"{name}-{number}"
        return candidate

    def _timeout(
        self, file: str, label: str, hook: dict[str, Any], path: tuple[str | int, ...]
    ) -> float | None:
        if "timeout" not in hook:
            self._untimed += 1
            return None
        value = _number(hook["timeout"])
        if value is None or value <= 0:
            self._note(
                file,
                (*path, "timeout"),
                label,
                f"{hook['timeout']!r} is not a positive number; relay's default of 60 seconds "
                "applies",
            )
            return None
        if self.agent == "gemini":
            seconds = _whole(value / 1000)  # Gemini CLI counts milliseconds
            self._converted_timeouts.append(f"{value:g} ms -> {seconds:g} s")
            return seconds
        if value > MILLISECOND_SUSPECT:
            self._note(
                file,
                (*path, "timeout"),
                label,
                f"{value:g} seconds is over 600: relay will ask 'did you mean milliseconds?' "
                "on every run",
            )
        return _whole(value)

    def _note(self, file: str, path: tuple[str | int, ...], label: str, message: str) -> None:
        self.report.append(f"{file}: {render_path(path)} ({label}): {message}")

    def _note_other_keys(self, file: str, document: dict[str, Any], used: set[str]) -> None:
        others = [key for key in document if key not in used and key != "$schema"]
        if others:
            self.report.append(
                f"{file}: not hook settings, left alone: {', '.join(sorted(others))}"
            )
